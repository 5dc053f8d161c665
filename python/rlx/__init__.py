"""rlx: an ML compiler and runtime with a Python front end and a Rust core."""

from rlx._rlx import __version__
from rlx._types import dtype_name
from rlx.custom import register_op
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

__all__ = [
    "DTypeError",
    "Executable",
    "Graph",
    "GraphError",
    "KernelError",
    "Node",
    "RlxError",
    "ShapeError",
    "SplatConfig",
    "UnsupportedOpError",
    "WeightFormatError",
    "__version__",
    "compile",
    "register_op",
    "dtype_name",
]
