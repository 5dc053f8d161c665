"""Type stubs for the native module ``rlx._rlx`` (crates/rlx-py)."""

from collections.abc import Sequence
from typing import Any, Callable, Final, Optional, Union, final

__all__ = [
    "DTypeError",
    "DecodeStep",
    "Executable",
    "Graph",
    "GraphError",
    "KernelError",
    "RlxError",
    "ShapeError",
    "UnsupportedOpError",
    "WeightFormatError",
    "__version__",
    "amx_available",
    "dtype_name",
    "env_problems",
    "env_vars",
    "gguf_dequantize_rows",
    "ggml_types",
    "gguf_string_offsets",
    "pass_names",
    "set_amx_prefill_gemm",
    "set_int8_activation_levels",
    "set_int8_activations",
    "set_int8_prefill_gemm",
    "thunk_variants",
]

__version__: Final[str]

class RlxError(Exception):
    """Base class of every rlx error."""

class ShapeError(RlxError):
    """Operand shapes do not fit an op, or an input has the wrong shape."""

class DTypeError(RlxError):
    """Unknown dtype, or operand dtypes that do not fit an op."""

class UnsupportedOpError(RlxError):
    """An op this build or device cannot compile or run."""

class WeightFormatError(RlxError):
    """A weight file or tensor that cannot be read."""

class KernelError(RlxError):
    """A kernel failed to compile or run."""

class GraphError(RlxError):
    """A malformed graph: bad node id, bad attribute, failed verification."""

@final
class Graph:
    """A graph under construction (``rlx.Graph`` wraps it)."""

    def __new__(cls, name: str = "graph") -> Graph: ...
    @property
    def name(self) -> str:
        """Graph name."""
    def add(self, op_json: str, inputs: list[int], name: str = "") -> int:
        """Add a node (``op_json`` is the serde form of an op); returns its id."""
    def shape(self, id: int) -> tuple[list[Union[int, str]], str]:
        """``(dims, dtype)`` of node ``id``."""
    def node(self, id: int) -> tuple[str, list[int], str]:
        """``(op_name, inputs, name)`` of node ``id``."""
    def op_json(self, id: int) -> str:
        """The op of node ``id`` as JSON."""
    def set_outputs(self, ids: list[int]) -> None:
        """Declare the outputs."""
    def outputs(self) -> list[int]:
        """The declared outputs."""
    def verify(self) -> None:
        """Run the verifier."""
    def to_json(self) -> str:
        """Serialise to JSON."""
    @staticmethod
    def from_json(s: str) -> Graph:
        """Parse (and verify) a graph from JSON."""
    def __len__(self) -> int: ...
    def __str__(self) -> str: ...

def dtype_name(s: str) -> str:
    """Normalise a dtype spelling to rlx's short name."""

def gguf_dequantize_rows(ggml_type: int, data: Any, rows: Sequence[int], k: int, out: Any) -> None:
    """Embedding lookup on packed GGUF rows with the native row decoders.

    ``data``: C-contiguous uint8 numpy array ``[n_rows, row_bytes(k)]`` of
    ggml type id ``ggml_type`` (a memmap is read in place); ``rows``: any
    integer sequence; ``out``: writable C-contiguous float32 array
    ``[len(rows), k]``, written in place (nothing is returned). Raises
    WeightFormatError for an unknown type, ShapeError for mismatched arrays,
    KernelError naming the type and row for a row outside ``0..n_rows``
    (checked before anything is written)."""

def gguf_string_offsets(data: Any, start: int, count: int, big_endian: bool, out: Any) -> int:
    """Start offsets of the ``count`` items of a GGUF string array at ``start``
    of ``data`` (uint8) into ``out`` (uint64 ``[count + 1]``, last: the end);
    returns how many items lie wholly inside ``data``."""

def ggml_types() -> dict[int, tuple[str, int, int]]:
    """``{ggml type id: (name, elements per block, bytes per block)}`` of every
    GGUF type rlx runs (``rlx_ir::GgmlType``, the one table of these facts)."""

def env_problems() -> list[tuple[str, str]]:
    """What is wrong with the set ``RLX_*`` variables, as ``(name, message)`` rows."""

def env_vars() -> list[tuple[str, str, str]]:
    """The environment-variable registry as ``(name, default, meaning)`` rows."""

def pass_names() -> list[str]:
    """Every name ``RLX_DISABLE_PASS`` accepts: the graph fusions, then the
    thunk passes, each in running order."""

def thunk_variants() -> list[tuple[str, str]]:
    """Every thunk variant as ``(variant, seed name)``, ``Nop`` first."""

def set_int8_activations(enabled: bool) -> bool:
    """Turns the host's int8-activation matmul paths (AVX-512 VNNI: m <= 8,
    and the prefill GEMM for m > 8, always on two code levels) on or off for
    the process; returns the previous setting."""

def set_int8_activation_levels(levels: int) -> int:
    """How many int8 code levels the host's int8-activation
    matmuls for m <= 8 (decode and batched decode) use (prefill, m > 8,
    always uses two): 2 (the default) adds a residual level
    (``x ~ dx*qx + dx/256*qx2``, about 16-bit activations), 1 rounds to
    ``dx*qx`` alone as llama.cpp does; returns the previous count. Raises
    ``RlxError`` for other values."""

def set_int8_prefill_gemm(enabled: bool) -> bool:
    """Turns the host's integer-dot prefill GEMM (quantised matmuls with
    m > 8, two int8 code levels) on or off for the process; off, they
    multiply f32 activations with f32 weight panels. Returns the previous
    setting."""

def set_amx_prefill_gemm(enabled: bool) -> bool:
    """Turns the AMX tile path of the host's prefill GEMM (m >= 16 on CPUs
    with AMX-INT8) on or off for the process; off, the AVX-512 VNNI tiles
    run (same results up to float32 summation order). Returns the previous
    setting."""

def amx_available() -> bool:
    """Whether this machine can run the AMX tile path (AMX-INT8 present and
    the tile state granted by the kernel), whatever the switch says."""

@final
class DecodeStep:
    """One decode step of a compiled decoder graph in one native call: writes
    the token's embedding row (dequantised from ``table``, times ``scale``),
    the RoPE ``cos`` / ``sin`` of ``pos · inv_freq`` (f64, rounded to f32),
    the cache slot, ``kv_len`` and ``row`` into the arena at the given byte
    offsets, then runs the executable."""

    def __new__(
        cls,
        table: Any,
        ggml_type: int,
        k: int,
        scale: float,
        x: int,
        rope: Sequence[tuple[Sequence[float], int, int]],
        slots: int,
        kv_len: int,
        row: Optional[int],
        arena_len: int,
    ) -> DecodeStep: ...
    def run(self, exe: Executable, fallback: Any, token: int, pos: int) -> None:
        """Write token ``token``'s inputs at position ``pos``, then run ``exe``."""

@final
class Executable:
    """A compiled graph with its arena, weights segments and state buffer.

    ``rlx.Executable`` wraps it.
    """

    def __new__(
        cls,
        graph: Graph,
        device: str = "host",
        dims: Optional[dict[str, int]] = None,
        rng_seed: int = 0,
        rng_offset: int = 0,
    ) -> Executable: ...
    def set_profiling(self, on: bool) -> None:
        """Switch per-thunk timing of runs on (clearing earlier figures) or off."""
    def profile(self) -> list[tuple[int, str, float, int]]:
        """(index, thunk name, seconds, calls) per thunk that ran since profiling began."""
    def set_tracing(self, on: bool) -> None:
        """Switch per-thunk tracing of runs on (clearing earlier slices) or off."""
    def take_trace(self) -> list[tuple[int, float, float]]:
        """(index, start, seconds) per thunk run since tracing began or the last call."""
    def thunk_table(self) -> list[tuple[str, int, int, bool]]:
        """(name, bytes read, bytes written, native) per thunk, from its io() ranges."""
    def compile_stages(self) -> list[tuple[str, float, float]]:
        """(stage, start, seconds) of the compile, start after the compile began."""
    def pass_report(self) -> str:
        """The fusion-pass report (a line per pass, dispatches), then the Metal plan figures."""
    def verify(self) -> None:
        """Run the schedule verifier."""
    def arena_view(self) -> memoryview:
        """Writable memoryview of the arena."""
    def segment_count(self) -> int:
        """Number of weights segments (1 + number of params)."""
    def segment_view(self, i: int) -> Optional[memoryview]:
        """Weights segment ``i`` (writable if owned, read-only if bound; ``None`` while unset)."""
    def own_segment(self, i: int) -> memoryview:
        """Make segment ``i`` owned (zeroed unless already owned); a writable view of it."""
    def bind_segment(self, i: int, owner: Any, address: int, nbytes: int, align: int) -> None:
        """Internal: point segment ``i`` at ``nbytes`` at ``address``, memory owned by ``owner``."""
    def state_view(self) -> memoryview:
        """Writable memoryview of the state buffer."""
    def share_state(self, other: Executable) -> None:
        """Use ``other``'s state buffer (identical state tables only)."""
    def shares_state_with(self, other: Executable) -> bool:
        """True when both use one state buffer."""
    def instance(self, state_of: Optional[Executable] = None) -> Executable:
        """Another instance of the compiled plan: own arena and state, shared weights."""
    def shares_plan_with(self, other: Executable) -> bool:
        """True when both run one compiled plan."""
    def reset_state(self) -> None:
        """Zero-fill the state buffer."""
    def bindings(self) -> list[tuple[str, str, int, int, list[int], str]]:
        """``(kind, name, node, offset, dims, dtype)`` of inputs, params, states, outputs."""
    def set_active_extent(self, full: int, inputs: list[str]) -> int:
        """Plan runs on a prefix of the ``full`` token rows; returns the scaled thunk count."""
    def run(self, fallback: Callable[[int, str], Any], active: Optional[int] = None) -> None:
        """Run once (on the first ``active`` token rows when given); ``fallback(index,
        thunk_json)`` runs thunks without a native kernel."""
    def schedule(self) -> str:
        """The schedule, one thunk per line."""
    def thunk_rows(
        self,
    ) -> list[
        tuple[
            str,
            str,
            list[tuple[str, int, int]],
            list[tuple[str, int, int]],
            Optional[str],
        ]
    ]:
        """Per thunk ``(name, text, reads, writes, made_by)``: each range is
        ``(buffer, offset, bytes)`` (buffer ``"arena"``, a state or param name,
        ``"state"`` or ``"const"``); ``made_by`` names the pass that made it."""
    def metal_commands(
        self,
    ) -> list[tuple[str, int, str, list[int], list[int]]]:
        """The Metal plan: ``(kind, thunk, kernel, grid, threadgroup)`` per
        command, kind ``dispatch`` / ``user`` / ``host`` / ``barrier`` / ``check`` (a
        validating kernel's status read, a sync point; kernel = the op it checks)."""
    def metal_plan(self) -> str:
        """The Metal plan, one command per line."""
    def value_plan(
        self,
    ) -> tuple[int, list[Optional[tuple[int, int, int, int, int, int, int]]]]:
        """The planner's step count and per node ``None`` (fused away, or not in
        the arena) or ``(step, start, end, held_until, offset, bytes, alias_of)``."""
    def num_thunks(self) -> int:
        """Number of thunks."""
    def thunk_json(self, i: int) -> str:
        """Thunk ``i`` as reference-protocol JSON."""
    def stats(self) -> dict[str, Any]:
        """Compile figures."""
