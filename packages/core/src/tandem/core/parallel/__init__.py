"""Tensor parallelism inside one model: how its parameters split over ranks
(:mod:`.partition`, :mod:`.layout`) and the collectives the layers call (:mod:`.group`).

A model built without a :class:`~tandem.core.parallel.group.TensorParallel` is the
single-process model, with no collective and no extra branch in its layers.
"""
