"""Tandem custom ops (the ``tandem`` torch.library namespace).

Subpackages: :mod:`tandem.kernels.ops` (the ops and their Python entry points),
:mod:`tandem.kernels.sampling` (seeded sampling and logit processors shared by the
engines), :mod:`tandem.kernels.backends` (attention backends by name) and
:mod:`tandem.kernels.reference` (the slow, obvious specification of every op).
Nothing is imported here, so ``import tandem.kernels`` registers no op by itself.
"""

from __future__ import annotations

OP_NAMESPACE = "tandem"

__all__ = ["OP_NAMESPACE"]
