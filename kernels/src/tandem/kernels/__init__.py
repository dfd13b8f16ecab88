"""Tandem custom ops (the ``tandem`` torch.library namespace)."""
