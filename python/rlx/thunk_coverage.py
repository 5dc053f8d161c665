"""Coverage of the thunk set: for every thunk variant, a small graph built
through the public :class:`rlx.Graph` API that lowers to it (a *probe*), and
what compiling and running that graph shows.

The variant list comes from the native module (``rlx._rlx.thunk_variants``,
the Rust enum itself); each row of :func:`thunk_table` is measured, not
declared: the probe graph is compiled on the host, its schedule must hold the
variant's thunk (``stats["by_thunk"]``), ``native`` is false when the host
runs it through the numpy fallback (``stats["fallback_by_thunk"]``) and
``metal`` is false when the Metal plan runs it as a host command
(``stats["metal_host_by_thunk"]``; the plan is built on every compile).
``host_by_design`` marks the seed's own host variants (``*Host``,
``HostOp``, ``CustomOp``), which may call back into Python and have no
Metal kernel by design.

``rlx inspect --thunks`` prints the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from rlx import _rlx
from rlx.errors import RlxError
from rlx.graph import Graph, Node
from rlx.ops.misc import SplatConfig

__all__ = [
    "PROBES",
    "SEED_METAL_HOST",
    "Probe",
    "ProbeGraph",
    "ThunkRow",
    "compile_probe",
    "complete",
    "host_by_design",
    "probe_env",
    "seed_metal_host",
    "thunk_table",
]


def host_by_design(variant: str) -> bool:
    """True for the seed's explicit host variants (``*Host``, ``HostOp``,
    ``CustomOp``) and ``CustomGpuOp`` (whose host path is the user's Python
    fallback): they may call back into Python (no native kernel needed)."""
    return variant.endswith("Host") or variant in ("HostOp", "CustomOp", "CustomGpuOp")


# Variants the seed's own Metal backend runs on the host (its doc comments in
# /work/shared/seed/rlx-metal-0.2.13-thunk.rs.txt say "host fallback" /
# "host CPU" with no kernel path), beyond the explicit host variants: a
# Metal host command is by design for them. The one hand-written column.
SEED_METAL_HOST = frozenset(
    {
        "Sample",
        "Reverse",
        "ArgReduce",  # "Host fallback over ..."
        "DequantMatMulInt8",
        "DequantMatMulInt4",
        "DequantMatMulFp8",
        "DequantMatMulNvfp4",  # "CPU host fallback"
        "ScaledMatMul",
        "ScaledQuantize",
        "ScaledDequantize",
        "ScaledQuantScale",  # "host fallback"
        "RmsNormBackwardInput",
        "RmsNormBackwardGamma",
        "RmsNormBackwardBeta",
        "RopeBackward",
        "CumsumBackward",
        "GatherBackward",  # "Training backward ops"
        "MaxPool2dBackward",  # "host CPU"
        "GaussianSplatRender",  # "host fallback via splat"
        "Im2Col",
        "LogMel",
        "CpuIndexing",
        "RngNormal",  # "host fallback" / "Host fill"
    }
)


def seed_metal_host(variant: str) -> bool:
    """True when the seed runs ``variant`` on the host on Metal (no kernel
    required): the explicit host variants and :data:`SEED_METAL_HOST`."""
    return host_by_design(variant) or variant in SEED_METAL_HOST


class ProbeGraph:
    """A graph plus the values to run it with: inputs and params get data
    when declared (uniform in [0.5, 1.5) for floats, zeros for integers,
    unless given)."""

    def __init__(self, name: str) -> None:
        self.g = Graph(name)
        self.feeds: dict[str, np.ndarray] = {}
        self.params: dict[str, np.ndarray] = {}
        self.states: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(0)

    def _data(self, shape: list[int], dtype: str, data: Any) -> np.ndarray:
        np_dt = np.dtype(
            {
                "f32": "float32",
                "f16": "float16",
                "i32": "int32",
                "u8": "uint8",
                "i64": "int64",
                "f64": "float64",
            }[dtype]
        )
        if data is not None:
            return np.asarray(data, np_dt).reshape(shape)
        if np_dt.kind == "f":
            return self._rng.uniform(0.5, 1.5, shape).astype(np_dt)
        return np.zeros(shape, np_dt)

    def x(self, name: str, shape: list[int], dtype: str = "f32", data: Any = None) -> Node:
        """An input with its feed."""
        self.feeds[name] = self._data(shape, dtype, data)
        return self.g.input(name, shape, dtype)

    def st(self, name: str, shape: list[int], dtype: str = "f32", data: Any = None) -> Node:
        """A state with its initial value."""
        self.states[name] = self._data(shape, dtype, data)
        return self.g.state(name, shape, dtype)

    def w(self, name: str, shape: list[int], dtype: str = "f32", data: Any = None) -> Node:
        """A param with its value."""
        self.params[name] = self._data(shape, dtype, data)
        return self.g.param(name, shape, dtype)


@dataclasses.dataclass(frozen=True)
class Probe:
    """How a variant is reached: ``produced_by`` names the IR op or pass,
    ``build`` adds the graph (and its outputs) to a :class:`ProbeGraph`;
    ``env`` holds environment variables set while the probe compiles (a
    threshold lowered so that a small graph takes a large-graph path)."""

    produced_by: str
    build: Callable[[ProbeGraph], None]
    env: tuple[tuple[str, str], ...] = ()


@contextlib.contextmanager
def probe_env(variant: str) -> Iterator[None]:
    """Set ``variant``'s probe environment (:attr:`Probe.env`) for the
    duration of the block, restoring the previous values after."""
    probe = PROBES.get(variant)
    saved = {k: os.environ.get(k) for k, _ in (probe.env if probe else ())}
    try:
        for k, v in probe.env if probe else ():
            os.environ[k] = v
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def _un(op: str) -> Callable[[ProbeGraph], None]:
    def build(p: ProbeGraph) -> None:
        p.g.outputs(getattr(p.g, op)(p.x("a", [4, 8])))

    return build


def _gguf_mlp(p: ProbeGraph, gelu: bool, packed: bool) -> None:
    # one-token gated MLP in q8_0 (34 bytes per 32 elements): k=32, n=32
    g, k, n = p.g, 32, 32
    x, h = p.x("x", [1, 1, k]), p.x("h", [1, 1, k])
    if packed:
        c = g.dequant_matmul(x, p.w("wgu", [2 * n, 34], "u8"), scheme="q8_0", n=2 * n, k=k)
        gate, up = g.narrow(c, -1, 0, n), g.narrow(c, -1, n, n)
    else:
        gate = g.dequant_matmul(x, p.w("wg", [n, 34], "u8"), scheme="q8_0", n=n, k=k)
        up = g.dequant_matmul(x, p.w("wu", [n, 34], "u8"), scheme="q8_0", n=n, k=k)
    a = g.gelu_approx(gate) if gelu else g.silu(gate)
    d = g.dequant_matmul(g.mul(a, up), p.w("wd", [k, 34], "u8"), scheme="q8_0", n=k, k=n)
    # x read again afterwards: the planner cannot put the product on x's slot
    g.outputs(g.add(h, d), g.mul(x, 2.0))


def _b(fn: Callable[[ProbeGraph], Any]) -> Callable[[ProbeGraph], None]:
    """A builder whose function returns the output node(s)."""

    def build(p: ProbeGraph) -> None:
        out = fn(p)
        p.g.outputs(*(out if isinstance(out, tuple) else (out,)))

    return build


_CFG = SplatConfig(width=8, height=8, tile_size=4)


def _splat_inputs(p: ProbeGraph) -> tuple[Node, ...]:
    n = 2
    return (
        p.x("pos", [n, 3]),
        p.x("scl", [n, 3]),
        p.x("rot", [n, 4]),
        p.x("opa", [n]),
        p.x("col", [n, 3]),
        p.x("sh", [n, 1, 3]),
        p.x("cam", [20]),
    )


def _splat_rasterize(p: ProbeGraph) -> Node:
    ins = _splat_inputs(p)
    return p.g.gaussian_splat_rasterize(
        p.g.gaussian_splat_prepare(*ins, cfg=_CFG), ins[6], cfg=_CFG
    )


def _scan_body() -> Graph:
    body = Graph("body")
    c = body.input("c", [4])
    xs = body.input("x", [4])
    s = body.add(c, xs)
    body.outputs(s, body.tanh(s))
    return body


def _custom_probe_op() -> str:
    """Registers (once) and names a user op doubling its input."""
    from rlx.custom import register_op

    def host(inputs: list[np.ndarray], out: np.ndarray) -> None:
        out[...] = inputs[0] * 2

    register_op("rlx_probe_double", lambda shape: shape, host)
    return "rlx_probe_double"


_PROBE_MSL = """
#include <metal_stdlib>
using namespace metal;
kernel void probe_triple(device const float* x [[buffer(0)]],
                         device float* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
    if (i < n) { out[i] = 3.0f * x[i]; }
}
"""


def _custom_gpu_probe_op() -> str:
    """Registers (once) and names a user GPU op tripling its input."""
    from rlx.custom import register_gpu_op

    def host(inputs: list[np.ndarray], out: np.ndarray) -> None:
        out[...] = inputs[0] * 3

    register_gpu_op("rlx_probe_triple", _PROBE_MSL, kernel="probe_triple", fallback=host)
    return "rlx_probe_triple"


def _batch_regions(p: ProbeGraph) -> tuple[Node, ...]:
    # two regions with one chain; the concat keeps their inputs alive, so
    # neither output is planned on the other region's inputs (which would
    # make them dependent)
    a, b, c, d = (p.x(n, [4, 8]) for n in "abcd")
    g = p.g
    return g.exp(g.sin(a) * b), g.exp(g.sin(c) * d), g.concat([a, b, c, d], axis=0)


def _split_last(p: ProbeGraph) -> None:
    x = p.x("a", [4, 12])
    p.g.outputs(*(p.g.narrow(x, -1, 4 * i, 4) for i in range(3)))


def _gated_norm(p: ProbeGraph) -> None:
    # x and z read again afterwards (the pass's own test graph): the output
    # cannot take their slots
    g, x, z = p.g, p.x("a", [4, 8]), p.x("z", [4, 8])
    g.outputs(g.mul(g.rms_norm(x, p.w("g", [8])), g.silu(z)), g.add(x, z))


def _dw_conv1d(p: ProbeGraph) -> None:
    # [1, w=6, c=4] depthwise over w with 3 taps → [1, 4, 4], then silu
    g, x = p.g, p.x("a", [1, 6, 4])
    y = g.conv2d(
        g.reshape(g.transpose(x, [0, 2, 1]), [1, 4, 1, 6]), p.w("w", [4, 1, 1, 3]), groups=4
    )
    g.outputs(g.silu(g.transpose(g.reshape(y, [1, 4, 4]), [0, 2, 1])), g.mul(x, 2.0))


# fmt: off
PROBES: dict[str, Probe] = {
    "Cast": Probe("op cast (f32 -> f16)", _b(lambda p: p.g.cast(p.x("a", [4, 8]), "f16"))),
    "CastHost": Probe("op cast (f32 -> i64)", _b(lambda p: p.g.cast(p.x("a", [4, 8]), "i64"))),
    "CastTruncF32": Probe("op cast (f32 -> f32, trunc=True)",
                          _b(lambda p: p.g.cast(p.x("a", [4, 8]), "f32", trunc=True))),
    "ActivationInPlace": Probe("op activation, operand dying there (in_place_activation)",
                               _b(lambda p: p.g.tanh(p.g.softmax(p.x("a", [4, 8]))))),
    "ActivationOut": Probe("op activation", _un("tanh")),
    "GeluApproxOut": Probe("op gelu_approx", _un("gelu_approx")),
    "GeluApproxHost": Probe("op gelu_approx, arena past RLX_GELU_HOST_ARENA_BYTES",
                            _un("gelu_approx"), env=(("RLX_GELU_HOST_ARENA_BYTES", "0"),)),
    "FusedBinaryActivation": Probe(
        "pass rewrite_simple_elementwise_regions (act(op(x, y)))",
        _b(lambda p: p.g.tanh(p.g.add(p.x("a", [4, 8]), p.x("b", [4, 8]))))),
    "FusedTernaryActivation": Probe(
        "pass rewrite_simple_elementwise_regions (act(op1(op0(x, y), z)))",
        _b(lambda p: p.g.tanh(p.g.mul(p.g.add(p.x("a", [4, 8]), p.x("b", [4, 8])),
                                      p.x("c", [4, 8]))))),
    "BinaryFull": Probe("op add", _b(lambda p: p.g.add(p.x("a", [4, 8]), p.x("b", [4, 8])))),
    "BinaryBroadcast": Probe("op add (broadcast)",
                             _b(lambda p: p.g.add(p.x("a", [4, 1, 8]), p.x("b", [3, 8])))),
    "BiasAdd": Probe("op add (row bias)",
                     _b(lambda p: p.g.add(p.x("a", [4, 8]), p.w("bias", [8])))),
    "Compare": Probe("op compare", _b(lambda p: p.g.lt(p.x("a", [4, 8]), p.x("b", [4, 8])))),
    "Where": Probe("op where", _b(lambda p: p.g.where(
        p.g.lt(p.x("c", [4, 8]), 1.0), p.x("a", [4, 8]), p.x("b", [4, 8])))),
    "Fma": Probe("op fma", _b(lambda p: p.g.fma(p.x("a", [4, 8]), p.x("b", [4, 8]),
                                                p.x("c", [4, 8])))),
    "FusedSwiGLU": Probe("op swiglu", _b(lambda p: p.g.swiglu(p.x("a", [4, 16])))),
    "ElementwiseRegion": Probe("graph fusion (elementwise chain)", _b(lambda p: p.g.exp(
        p.g.tanh(p.g.sin(p.x("a", [4, 8])) * p.x("b", [4, 8]) + p.x("c", [4, 8]))
        - p.x("d", [4, 8])))),
    "BatchElementwiseRegion": Probe("pass batch_elementwise_regions (same-chain regions)",
                                    _b(_batch_regions)),
    "Sgemm": Probe("op matmul", _b(lambda p: p.x("a", [4, 8]) @ p.w("w", [8, 6]))),
    "BatchedSgemm": Probe("op matmul (batched)",
                          _b(lambda p: p.x("a", [2, 4, 8]) @ p.x("b", [2, 8, 6]))),
    "FusedMmBiasAct": Probe("op matmul_bias_act", _b(lambda p: p.g.matmul_bias_act(
        p.x("a", [4, 8]), p.w("w", [8, 6]), p.w("bias", [6]), act="gelu"))),
    "GroupedMatMul": Probe("op grouped_matmul", _b(lambda p: p.g.grouped_matmul(
        p.x("a", [6, 8]), p.w("w", [4, 8, 5]), p.x("idx", [6], "i32", [0, 1, 2, 3, 0, 1])))),
    "ScaledMatMul": Probe("op scaled_matmul", _b(lambda p: p.g.scaled_matmul(
        p.x("lhs", [8, 32], "u8"), p.w("rhs", [16, 32], "u8"), p.x("ls", [1]), p.w("rs", [1])))),
    "ScaledQuantize": Probe("op scaled_quantize", _b(lambda p: p.g.scaled_quantize(
        p.x("a", [8, 32]), p.x("s", [1])))),
    "ScaledDequantize": Probe("op scaled_dequantize", _b(lambda p: p.g.scaled_dequantize(
        p.x("c", [8, 32], "u8"), p.x("s", [1])))),
    "ScaledQuantScale": Probe("op scaled_quant_scale",
                              _b(lambda p: p.g.scaled_quant_scale(p.x("a", [8, 32])))),
    "DequantMatMulGguf": Probe("op dequant_matmul (gguf q8_0)", _b(lambda p: p.g.dequant_matmul(
        p.x("a", [3, 32]), p.w("wq", [5, 34], "u8"), scheme="q8_0"))),
    "DequantMatMulGgufT": Probe("op dequant_matmul_t (gguf q8_0)", _b(
        lambda p: p.g.dequant_matmul_t(p.x("a", [3, 5]), p.w("wq", [5, 34], "u8"),
                                       scheme="q8_0", k=32))),
    "DequantGroupedMatMulGguf": Probe("op dequant_grouped_matmul (gguf q8_0)", _b(
        lambda p: p.g.dequant_grouped_matmul(p.x("a", [6, 32]), p.w("wq", [4, 5, 34], "u8"),
                                             p.x("idx", [6], "i32"), scheme="q8_0"))),
    "DequantMatMulInt8": Probe("op dequant_matmul (int8/32)", _b(lambda p: p.g.dequant_matmul(
        p.x("a", [3, 64]), p.w("wq", [16, 64], "u8"), p.w("sc", [16, 2]), scheme="int8/32"))),
    "DequantMatMulInt4": Probe("op dequant_matmul (int4/32)", _b(lambda p: p.g.dequant_matmul(
        p.x("a", [3, 64]), p.w("wq", [16, 32], "u8"), p.w("sc", [16, 2]), scheme="int4/32"))),
    "DequantMatMulFp8": Probe("op dequant_matmul (fp8_e4m3)", _b(lambda p: p.g.dequant_matmul(
        p.x("a", [3, 64]), p.w("wq", [16, 64], "u8"), p.w("sc", [16]), scheme="fp8_e4m3"))),
    "DequantMatMulNvfp4": Probe("op dequant_matmul (nvfp4)", _b(lambda p: p.g.dequant_matmul(
        p.x("a", [3, 64]), p.w("wq", [16, 32], "u8"), p.w("sc", [16, 4], "u8"), p.w("gs", [1]),
        scheme="nvfp4"))),
    "FusedMlpGateUpSwiGLU": Probe("pass fuse_decode_mlp (silu)",
                                  lambda p: _gguf_mlp(p, gelu=False, packed=False)),
    "FusedMlpGateUpGelu": Probe("pass fuse_decode_mlp (gelu_approx)",
                                lambda p: _gguf_mlp(p, gelu=True, packed=False)),
    "FusedMlpDownResidual": Probe("pass fuse_decode_mlp_combined_gate_up",
                                  lambda p: _gguf_mlp(p, gelu=False, packed=True)),
    "LayerNorm": Probe("op layer_norm", _b(lambda p: p.g.layer_norm(
        p.x("a", [4, 8]), p.w("g", [8]), p.w("b", [8])))),
    "RmsNorm": Probe("op rms_norm", _b(lambda p: p.g.rms_norm(p.x("a", [4, 8]), p.w("g", [8])))),
    "GroupNorm": Probe("op group_norm", _b(lambda p: p.g.group_norm(
        p.x("a", [1, 4, 3, 3]), p.w("g", [4]), p.w("b", [4]), num_groups=2))),
    "LayerNorm2d": Probe("op layer_norm2d", _b(lambda p: p.g.layer_norm2d(
        p.x("a", [1, 4, 3, 3]), p.w("g", [4]), p.w("b", [4])))),
    "FusedResidualLN": Probe("op residual_layer_norm", _b(lambda p: p.g.residual_layer_norm(
        p.x("a", [4, 8]), p.x("r", [4, 8]), p.w("g", [8]), p.w("b", [8])))),
    "FusedResidualRmsNorm": Probe("op residual_rms_norm", _b(lambda p: p.g.residual_rms_norm(
        p.x("a", [4, 8]), p.x("r", [4, 8]), p.w("g", [8])))),
    "AdaLayerNorm": Probe("op ada_layer_norm", _b(lambda p: p.g.ada_layer_norm(
        p.x("a", [4, 8]), p.x("s", [4, 8]), p.x("t", [4, 8])))),
    "GatedResidual": Probe("op gated_residual", _b(lambda p: p.g.gated_residual(
        p.x("a", [4, 8]), p.x("y", [4, 8]), p.x("gt", [4, 8])))),
    "FusedRmsNormMulSilu": Probe("pass fuse_gdn_gated_norm", _gated_norm),
    "Attention": Probe("op attention", _b(lambda p: p.g.attention(
        p.x("q", [1, 4, 16]), p.x("k", [1, 4, 16]), p.x("v", [1, 4, 16]), heads=2))),
    "FusedAttn": Probe("op fused_attention_block", _b(lambda p: p.g.fused_attention_block(
        p.x("a", [1, 4, 16]), p.w("wqkv", [16, 48]), p.w("wo", [16, 16]), heads=2))),
    "Rope": Probe("op rope", _b(lambda p: p.g.rope(
        p.x("a", [1, 4, 16]), p.x("cos", [4, 4]), p.x("sin", [4, 4]), head_dim=8))),
    "AxialRope2dHost": Probe("op axial_rope2d", _b(lambda p: p.g.axial_rope2d(
        p.x("a", [1, 4, 16]), end_x=2, end_y=2, head_dim=8, num_heads=2))),
    "Narrow": Probe("op narrow", _b(lambda p: p.g.narrow(p.x("a", [4, 8]), -1, 2, 3) * 2.0)),
    "SplitLastAxis": Probe("pass narrow_clusters (narrows tiling the last axis)", _split_last),
    "Copy": Probe("op softmax (inner axis: transpose, copy, softmax)",
                  _b(lambda p: p.g.softmax(p.x("a", [4, 8]), axis=0))),
    "Concat": Probe("op concat", _b(lambda p: p.g.concat([p.x("a", [4, 8]), p.x("b", [4, 8])],
                                                          axis=1))),
    "Transpose": Probe("op transpose", _b(lambda p: p.g.transpose(p.x("a", [4, 8])))),
    "Reverse": Probe("op reverse", _b(lambda p: p.g.reverse(p.x("a", [4, 8])))),
    "Gather": Probe("op gather", _b(lambda p: p.g.gather(p.w("t", [10, 8]), p.x("i", [3], "i32")))),
    "GatherAxis": Probe("op gather_axis", _b(lambda p: p.g.gather_axis(
        p.x("a", [4, 8]), p.x("i", [3], "i32"), axis=1))),
    "ScatterAdd": Probe("op scatter_add", _b(lambda p: p.g.scatter_add(
        p.x("u", [3, 8]), p.x("i", [3], "i32"), 5))),
    "CpuIndexing": Probe("op gather_nd", _b(lambda p: p.g.gather_nd(
        p.x("a", [4, 8]), p.x("i", [3, 1], "i32")))),
    "Softmax": Probe("op softmax", _un("softmax")),
    "SoftmaxCrossEntropyDense": Probe("op softmax_cross_entropy (dense targets)", _b(
        lambda p: p.g.softmax_cross_entropy(p.x("a", [4, 8]), p.x("t", [4, 8])))),
    "SoftmaxCrossEntropyWithLogits": Probe("op softmax_cross_entropy (labels)", _b(
        lambda p: p.g.softmax_cross_entropy(p.x("a", [4, 8]), p.x("t", [4], "i32")))),
    "SoftmaxCrossEntropyBackward": Probe("op softmax_cross_entropy_backward", _b(
        lambda p: p.g.softmax_cross_entropy_backward(p.x("a", [4, 8]), p.x("t", [4], "i32"),
                                                     p.x("d", [4])))),
    "Cumsum": Probe("op cumsum", _un("cumsum")),
    "Reduce": Probe("op sum", _b(lambda p: p.g.sum(p.x("a", [4, 8]), -1))),
    "TopK": Probe("op topk", _b(lambda p: p.g.topk(p.x("a", [4, 8]), 3))),
    "ArgReduce": Probe("op argmax", _un("argmax")),
    "Sample": Probe("op sample", _b(lambda p: p.g.sample(p.x("a", [1, 8])))),
    "Conv2D": Probe("op conv2d", _b(lambda p: p.g.conv2d(
        p.x("a", [1, 2, 5, 5]), p.w("w", [3, 2, 3, 3])))),
    "ConvTranspose2d": Probe("op conv_transpose2d", _b(lambda p: p.g.conv_transpose2d(
        p.x("a", [1, 2, 3, 3]), p.w("w", [2, 3, 3, 3])))),
    "Pool2D": Probe("op max_pool2d", _b(lambda p: p.g.max_pool2d(p.x("a", [1, 2, 4, 4]), 2))),
    "Im2Col": Probe("op im2col", _b(lambda p: p.g.im2col(p.x("a", [1, 2, 4, 4]), 2))),
    "ResizeNearest2x": Probe("op resize_nearest2x",
                             _b(lambda p: p.g.resize_nearest2x(p.x("a", [1, 2, 3, 3])))),
    "FusedDepthwiseConv1dBsc": Probe("pass fuse_depthwise_conv1d_bsc", _dw_conv1d),
    "GatedDeltaNet": Probe("op gated_delta_net", _b(lambda p: p.g.gated_delta_net(
        p.x("q", [1, 3, 8]), p.x("k", [1, 3, 8]), p.x("v", [1, 3, 8]),
        p.x("gg", [1, 3, 2]), p.x("beta", [1, 3, 2]), p.st("s", [1, 2, 4, 4]), heads=2))),
    "SelectiveScan": Probe("op selective_scan", _b(lambda p: p.g.selective_scan(
        p.x("a", [1, 3, 4]), p.x("d", [1, 3, 4]), p.w("A", [4, 2]), p.x("b", [1, 3, 2]),
        p.x("c", [1, 3, 2])))),
    "Mamba2": Probe("op mamba2", _b(lambda p: p.g.mamba2(
        p.x("a", [1, 3, 8]), p.x("dt", [1, 3, 2]), p.w("A", [2]), p.x("b", [1, 3, 2]),
        p.x("c", [1, 3, 2]), heads=2))),
    "Lstm": Probe("op lstm", _b(lambda p: p.g.lstm(
        p.x("a", [1, 3, 4]), p.w("wi", [1, 20, 4]), p.w("wh", [1, 20, 5]), p.w("b", [1, 20]),
        p.x("h0", [1, 1, 5]), p.x("c0", [1, 1, 5])))),
    "Gru": Probe("op gru", _b(lambda p: p.g.gru(
        p.x("a", [1, 3, 4]), p.w("wi", [1, 15, 4]), p.w("wh", [1, 15, 5]), p.w("bi", [1, 15]),
        p.w("bh", [1, 15]), p.x("h0", [1, 1, 5])))),
    "Rnn": Probe("op rnn", _b(lambda p: p.g.rnn(
        p.x("a", [1, 3, 4]), p.w("wi", [1, 5, 4]), p.w("wh", [1, 5, 5]), p.w("b", [1, 5]),
        p.x("h0", [1, 1, 5])))),
    "Fft1d": Probe("op fft", _b(lambda p: p.g.fft(p.x("a", [2, 8, 2])))),
    "LogMel": Probe("op log_mel", _b(lambda p: p.g.log_mel(
        p.x("s", [3, 16]), p.w("f", [4, 5]), n_fft=8))),
    "LogMelBackward": Probe("op log_mel_backward", _b(lambda p: p.g.log_mel_backward(
        p.x("s", [3, 16]), p.w("f", [4, 5]), p.x("d", [3, 4]), n_fft=8))),
    "WelchPeaks": Probe("op welch_peaks", _b(lambda p: p.g.welch_peaks(
        p.x("s", [4, 16]), n_fft=8, n_segments=4, k=2))),
    "AttentionBackward": Probe("op attention_backward", _b(lambda p: p.g.attention_backward(
        p.x("q", [1, 4, 16]), p.x("k", [1, 4, 16]), p.x("v", [1, 4, 16]),
        p.x("dy", [1, 4, 16]), wrt="q", heads=2))),
    "AdaLayerNormBackward": Probe("op ada_layer_norm_backward", _b(
        lambda p: p.g.ada_layer_norm_backward(p.x("a", [4, 8]), p.x("s", [4, 8]),
                                              p.x("dy", [4, 8])))),
    "GatedResidualBackward": Probe("op gated_residual_backward", _b(
        lambda p: p.g.gated_residual_backward(p.x("y", [4, 8]), p.x("gt", [4, 8]),
                                              p.x("dy", [4, 8])))),
    "RmsNormBackwardInput": Probe("op rms_norm_backward (wrt input)", _b(
        lambda p: p.g.rms_norm_backward(p.x("a", [4, 8]), p.w("g", [8]), p.w("b", [8]),
                                        p.x("dy", [4, 8]), wrt="input"))),
    "RmsNormBackwardGamma": Probe("op rms_norm_backward (wrt gamma)", _b(
        lambda p: p.g.rms_norm_backward(p.x("a", [4, 8]), p.w("g", [8]), p.w("b", [8]),
                                        p.x("dy", [4, 8]), wrt="gamma"))),
    "RmsNormBackwardBeta": Probe("op rms_norm_backward (wrt beta)", _b(
        lambda p: p.g.rms_norm_backward(p.x("a", [4, 8]), p.w("g", [8]), p.w("b", [8]),
                                        p.x("dy", [4, 8]), wrt="beta"))),
    "RopeBackward": Probe("op rope_backward", _b(lambda p: p.g.rope_backward(
        p.x("dy", [1, 4, 16]), p.x("cos", [4, 4]), p.x("sin", [4, 4]), head_dim=8))),
    "CumsumBackward": Probe("op cumsum_backward",
                            _b(lambda p: p.g.cumsum_backward(p.x("dy", [4, 8])))),
    "GatherBackward": Probe("op gather_backward", _b(lambda p: p.g.gather_backward(
        p.x("dy", [3, 8]), p.x("i", [3], "i32"), axis=0, axis_dim=5))),
    "MaxPool2dBackward": Probe("op max_pool2d_backward", _b(lambda p: p.g.max_pool2d_backward(
        p.x("a", [1, 2, 4, 4]), p.x("dy", [1, 2, 2, 2]), 2))),
    "Conv2dBackwardInput": Probe("op conv2d_backward_input", _b(
        lambda p: p.g.conv2d_backward_input(p.x("dy", [1, 3, 3, 3]), p.w("w", [3, 2, 3, 3]),
                                            input_hw=(5, 5)))),
    "Conv2dBackwardWeight": Probe("op conv2d_backward_weight", _b(
        lambda p: p.g.conv2d_backward_weight(p.x("a", [1, 2, 5, 5]), p.x("dy", [1, 3, 3, 3]),
                                             kernel=3))),
    "GaussianSplatRender": Probe("op gaussian_splat_render", _b(
        lambda p: p.g.gaussian_splat_render(*_splat_inputs(p), cfg=_CFG))),
    "GaussianSplatRenderBackward": Probe("op gaussian_splat_render_backward", _b(
        lambda p: p.g.gaussian_splat_render_backward(*_splat_inputs(p), p.x("dl", [8, 8, 3]),
                                                     cfg=_CFG))),
    "GaussianSplatPrepare": Probe("op gaussian_splat_prepare", _b(
        lambda p: p.g.gaussian_splat_prepare(*_splat_inputs(p), cfg=_CFG))),
    "GaussianSplatRasterize": Probe("op gaussian_splat_rasterize", _b(
        lambda p: _splat_rasterize(p))),
    "CustomOp": Probe("op custom_op (rlx.register_op)", _b(
        lambda p: p.g.custom_op(_custom_probe_op(), p.x("a", [4, 8])))),
    "CustomGpuOp": Probe("op custom_op (rlx.register_gpu_op)", _b(
        lambda p: p.g.custom_op(_custom_gpu_probe_op(), p.x("a", [4, 8])))),
    "SpdHost": Probe("op spd (log_eig)", _b(lambda p: p.g.spd(
        "log_eig", p.x("a", [2, 2], data=[[2.0, 0.5], [0.5, 1.0]])))),
    "ScanHost": Probe("op scan", _b(lambda p: p.g.scan(
        _scan_body(), [p.x("c0", [4])], [p.x("xs", [3, 4])]))),
    "HostOp": Probe("op scan_backward", _b(lambda p: p.g.scan_backward(
        _scan_body(), [p.x("c0", [4])], [p.x("xs", [3, 4])], p.x("dy", [3, 4])))),
    "RngNormal": Probe("op rng_normal", _b(lambda p: p.g.rng_normal([4, 8], seed=1))),
    "RngUniform": Probe("op rng_uniform", _b(lambda p: p.g.rng_uniform([4, 8], seed=1))),
    "VqAssign": Probe("op vq_assign", _b(lambda p: p.g.vq_assign(
        p.x("a", [4, 8]), p.w("cb", [5, 8])))),
}
# fmt: on


def complete(row: ThunkRow) -> bool:
    """Reached, native on the host (or a Python host variant by design) and
    with a Metal kernel (or run on the host by the seed itself)."""
    return (
        row.reached
        and (bool(row.native) or row.host_by_design)
        and (bool(row.metal) or row.seed_metal_host)
    )


@dataclasses.dataclass
class ThunkRow:
    """One variant's coverage. ``reached`` is true when the probe's schedule
    holds the variant's thunk; ``native`` / ``metal`` are ``None`` then,
    and ``error`` says why (the probe's compile error, or which thunks it
    lowered to)."""

    variant: str
    name: str
    produced_by: str
    host_by_design: bool
    seed_metal_host: bool
    reached: bool = False
    native: Optional[bool] = None
    metal: Optional[bool] = None
    error: str = ""


def compile_probe(variant: str, device: str = "host") -> tuple[ProbeGraph, Any]:
    """Build ``variant``'s probe graph and compile it for ``device``; raises
    :class:`rlx.RlxError` when the graph does not build or compile."""
    import rlx

    probe = PROBES.get(variant)
    if probe is None:
        raise RlxError(f"[thunks] no probe graph for {variant}")
    p = ProbeGraph(f"probe_{variant}")
    probe.build(p)
    with probe_env(variant):
        exe = rlx.compile(p.g, device=device)
    for k, v in p.params.items():
        exe.set_param(k, v)
    for k, v in p.states.items():
        exe.set_state(k, v)
    return p, exe


def _row(variant: str, name: str) -> ThunkRow:
    probe = PROBES.get(variant)
    row = ThunkRow(
        variant,
        name,
        probe.produced_by if probe else "-",
        host_by_design(variant),
        seed_metal_host(variant),
    )
    if probe is None:
        row.error = "no probe graph"
        return row
    try:
        _, exe = compile_probe(variant)
    except (RlxError, ValueError, TypeError) as e:
        row.error = str(e).splitlines()[0] if str(e) else type(e).__name__
        return row
    st = exe.stats
    if name not in st["by_thunk"]:
        row.error = "lowers to " + ", ".join(sorted(st["by_thunk"]))
        return row
    row.reached = True
    row.native = name not in st["fallback_by_thunk"]
    row.metal = name not in st["metal_host_by_thunk"]
    return row


def thunk_table() -> list[ThunkRow]:
    """One measured row per thunk variant (``Nop`` left out: no graph
    lowers to it, passes leave it in removed slots)."""
    return [_row(v, n) for v, n in _rlx.thunk_variants() if v != "Nop"]
