"""rlx: an ML compiler and runtime with a Python front end and a Rust core."""

# first: a Ctrl-C during the imports below exits the `rlx` command quietly
from rlx import _boot  # noqa: F401  # isort: skip

from typing import TYPE_CHECKING, Optional

from rlx._rlx import (
    __version__,
    amx_available,
    pass_names,
    set_amx_prefill_gemm,
    set_int8_activation_levels,
    set_int8_activations,
    set_int8_prefill_gemm,
)
from rlx._types import dtype_name
from rlx.autodiff import grad
from rlx.custom import register_gpu_op, register_op
from rlx.errors import (
    DTypeError,
    GraphError,
    KernelError,
    RlxError,
    ShapeError,
    UnsupportedOpError,
    WeightFormatError,
)
from rlx.executable import Executable, compile
from rlx.graph import Graph, Node, SplatConfig
from rlx.quantization import Quantized, QuantizeError, quantize

if TYPE_CHECKING:
    from rlx.models import DecoderModel


def load(
    path_or_name: str,
    device: str = "host",
    progress: bool = False,
    inplace: Optional[bool] = None,
    half_weights: str = "native",
    quantize: Optional[str] = None,
    kv_dtype: Optional[str] = None,
) -> "DecoderModel":
    """Load a decoder LLM: a GGUF file, a Hugging Face directory or a packaged
    name such as ``"smollm2"``; see :func:`rlx.models.load`."""
    from rlx.models import load as _load

    return _load(
        path_or_name, device=device, progress=progress, inplace=inplace,
        half_weights=half_weights, quantize=quantize, kv_dtype=kv_dtype,
    )  # fmt: skip


__all__ = [
    "DTypeError",
    "Executable",
    "Graph",
    "GraphError",
    "KernelError",
    "Node",
    "QuantizeError",
    "Quantized",
    "RlxError",
    "ShapeError",
    "SplatConfig",
    "UnsupportedOpError",
    "WeightFormatError",
    "__version__",
    "compile",
    "load",
    "pass_names",
    "quantize",
    "register_gpu_op",
    "register_op",
    "set_int8_activation_levels",
    "set_int8_activations",
    "set_int8_prefill_gemm",
    "set_amx_prefill_gemm",
    "amx_available",
    "dtype_name",
    "grad",
]
