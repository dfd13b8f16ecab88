"""Tandem engine v0: a synchronous engine that runs in the caller's process."""
