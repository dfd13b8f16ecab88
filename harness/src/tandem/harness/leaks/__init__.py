"""Leak checks: one ``LeakCheck`` per kind of state a test can leave behind.

``registry`` lists the kinds; ``probe`` runs inside Python child processes of the code
under test. Importing this package loads nothing else (the probe imports it at start-up).
"""
