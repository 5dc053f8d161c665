"""The rlx exception hierarchy (defined natively so Rust can raise it).

``RlxError`` is the root; ``ShapeError``, ``DTypeError``, ``UnsupportedOpError``,
``WeightFormatError``, ``KernelError`` and ``GraphError`` derive from it.

Three errors also derive from the builtin exception that Python code raised
for the same mistake before they existed, so ``except KeyError`` (etc.) keeps
working while ``except rlx.RlxError`` catches every error rlx raises:

* :class:`UnknownNameError` (``RlxError``, ``KeyError``): no param / state /
  input of that name (``set_param``, ``bind_param``, ``set_state``, ``state``);
* :class:`DeviceError` (``RlxError``, ``ValueError``): an unknown device;
* :class:`DimTypeError` (``ShapeError``, ``TypeError``): a dimension that is
  not an int or a symbol name (a float, a bool, None).
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


class UnknownNameError(RlxError, KeyError):
    """No param / state / input of the given name (also a ``KeyError``)."""

    def __str__(self) -> str:
        # KeyError quotes its message (repr of the key); rlx messages are text
        return str(self.args[0]) if self.args else ""


class DeviceError(RlxError, ValueError):
    """An unknown device name (also a ``ValueError``)."""


class DimTypeError(ShapeError, TypeError):
    """A dimension that is not an int or a symbol name (also a ``TypeError``)."""


__all__ = [
    "DTypeError",
    "DeviceError",
    "DimTypeError",
    "GraphError",
    "KernelError",
    "RlxError",
    "ShapeError",
    "UnknownNameError",
    "UnsupportedOpError",
    "WeightFormatError",
]
