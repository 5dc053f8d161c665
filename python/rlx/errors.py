"""The rlx exception hierarchy (defined natively so Rust can raise it).

``RlxError`` is the root; ``ShapeError``, ``DTypeError``, ``UnsupportedOpError``,
``WeightFormatError``, ``KernelError`` and ``GraphError`` derive from it.
"""

from rlx._rlx import (
    DTypeError,
    GraphError,
    KernelError,
    RlxError,
    ShapeError,
    UnsupportedOpError,
    WeightFormatError,
)

__all__ = [
    "DTypeError",
    "GraphError",
    "KernelError",
    "RlxError",
    "ShapeError",
    "UnsupportedOpError",
    "WeightFormatError",
]
