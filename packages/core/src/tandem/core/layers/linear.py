"""``nn.Linear`` that multiplies by its weight in the one form it is kept in.

The form (:mod:`tandem.core.layers.weight_form`) is the float weight at first
(:class:`~tandem.core.layers.weight_form.Dense`: on the CPU through a copy packed for
the engine's kernel), int8 after :meth:`Linear.quantize`, GGUF blocks after
:meth:`Linear.use_quantized`. The kernel is the engine's choice
(:class:`tandem.core.layers.kernel_choice.KernelChoice`, given through :meth:`Linear.use_kernel`
before the weights are packed): ``native`` (the default: this project's C kernel where the
CPU has AVX-512 or AVX2 with FMA and the weight is fp32, oneDNN elsewhere), ``onednn``, or
``torch`` for plain ``F.linear``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from tandem.core.layers.kernel_choice import LINEAR_KERNELS
from tandem.core.layers.no_init import skipping
from tandem.core.layers.weight_form import Dense, WeightForm, check_shape, gguf_form
from tandem.kernels.gguf_blocks import QuantStack, QuantWeight


def keep_form_alone(module: Any) -> int:
    """Keep ``module.form`` (a Linear's, an Embedding's) alone where it holds all of the
    weight (the C kernel's panels, int8, GGUF blocks: :meth:`WeightForm.standalone`) and
    free the float weight; the bytes freed."""
    form = module.form.standalone()
    if form is None:
        return 0
    module.form = form
    return free_weight(module)


def free_weight(module: nn.Module) -> int:
    """Drop ``module``'s float ``weight`` (its form holds all of it now: see
    :meth:`WeightForm.standalone`); the bytes freed."""
    weight = module.weight
    if weight is None:
        return 0
    module.register_parameter("weight", None)
    return weight.nbytes


def check_kernel(kernel: str) -> str:
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(LINEAR_KERNELS)}, got {kernel!r}")
    return kernel


class Linear(nn.Linear):
    """``nn.Linear`` whose weight is kept in one :class:`WeightForm`, ``form``: the float
    weight (its packed copy made on first use), int8 after :meth:`quantize`
    (``quantization="int8"``), or GGUF blocks after :meth:`use_quantized` (then it has no
    float ``weight``: ``quantization="gguf"``)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: Any = None
    ) -> None:
        super().__init__(in_features, out_features, bias=bias, dtype=dtype)
        self.kernel = "native"  # the engine's choice: see use_kernel
        self.form: WeightForm = Dense(self._parameters)

    def use_quantized(self, weight: QuantWeight | QuantStack) -> None:
        """Multiply by ``weight`` (GGUF blocks, [out, in]) from now on; the float weight
        must already be gone (the loader never makes it)."""
        shape = (self.out_features, self.in_features)
        self.form = check_shape(gguf_form(weight), shape, "layer")

    def use_kernel(self, kernel: str) -> None:
        """Multiply on ``kernel`` (one of ``LINEAR_KERNELS``) from now on."""
        self.kernel = check_kernel(kernel)
        self.form.use_kernel(kernel)

    def quantize(self) -> bool:
        """Use int8 weights from now on (CPU); False where no int8 kernel exists or the
        weight is kept in GGUF blocks."""
        form = self.form.quantized()
        if form is not None:
            self.form = form
        return form is not None

    def prepare(self) -> None:
        """Make the packed copy now (at load) rather than in the first forward pass."""
        self.form.prepare()

    def free_float(self) -> int:
        """Free the float weight where the form holds all of it; the bytes freed."""
        return keep_form_alone(self)

    def forward(self, x: Tensor) -> Tensor:
        out = self.form.matmul(x, self.bias)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def reset_parameters(self) -> None:
        if not skipping():  # inside no_init: the loader fills the weight
            super().reset_parameters()

    def _apply(self, fn: Any, recurse: bool = True) -> Linear:
        self.form = self.form.moved()  # .to() / .float(): packed again from the new weight
        return super()._apply(fn, recurse)
