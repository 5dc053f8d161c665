"""Host-vs-reference parity harness.

:func:`check` compiles one graph for ``device="host"`` and
``device="reference"``, binds the same params, runs the same inputs,
verifies both schedules, asserts that the thunks under test ran natively on
the host (``stats["fallback_by_thunk"]``), compares host against reference
with a per-dtype tolerance and, when given, both against an independent
numpy formula.

Tolerances (``|host − ref| ≤ tol·(1 + |ref|)``): f32 1e-5 — the reference
accumulates in float64 and rounds once, the host accumulates in f32, whose
error over the short reductions used here (≤ ~100 terms of unit-size values)
stays near 1e-6 relative; f16 1e-2 — one f16 rounding is ~5e-4 relative,
and f16 intermediates (scores, probabilities) add a few more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import rlx

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 1e-2}


def rand(
    rng: np.random.Generator, shape: Sequence[int], dtype: Any = np.float32, scale: float = 1.0
) -> np.ndarray:
    """Normal values of ``shape`` in ``dtype``."""
    return (rng.standard_normal(tuple(shape)) * scale).astype(dtype)


def close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    """Assert ``|got − want| ≤ tol·(1 + |want|)`` elementwise (NaN only where NaN)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g = np.asarray(got, np.float64)
    w = np.asarray(want, np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    assert (nan_g == nan_w).all(), f"{what}: NaN pattern differs"
    err = np.abs(g - w)[~nan_w]
    bound = (tol * (1.0 + np.abs(w)))[~nan_w]
    if err.size and not (err <= bound).all():
        i = int(np.argmax(err - bound))
        raise AssertionError(
            f"{what}: max excess error {float((err - bound)[i]):.3g} "
            f"(err {float(err[i]):.3g}, value {float(w[~nan_w][i]):.6g}, tol {tol})"
        )


def compile_both(
    g: rlx.Graph,
    params: Optional[dict[str, np.ndarray]] = None,
    dims: Optional[dict[str, int]] = None,
) -> tuple[rlx.Executable, rlx.Executable]:
    """Host and reference executables of ``g`` with ``params`` bound, both verified."""
    exes = []
    for device in ("host", "reference"):
        exe = rlx.compile(g, device=device, dims=dims)
        exe.verify()
        for name, value in (params or {}).items():
            exe.set_param(name, value)
        exes.append(exe)
    return exes[0], exes[1]


def assert_native(exe: rlx.Executable, names: Sequence[str]) -> None:
    """Every thunk named in ``names`` is in the schedule and has a native kernel."""
    stats = exe.stats
    for name in names:
        assert stats["by_thunk"].get(name, 0) > 0, (
            f"thunk '{name}' not in the schedule:\n{exe.schedule}"
        )
        fb = stats["fallback_by_thunk"].get(name, 0)
        assert fb == 0, f"{fb} '{name}' thunk(s) run through the numpy fallback on host"


def check(
    g: rlx.Graph,
    inputs: dict[str, np.ndarray],
    params: Optional[dict[str, np.ndarray]] = None,
    *,
    native: Sequence[str] = (),
    expect: Optional[dict[str, np.ndarray] | np.ndarray] = None,
    expect_tol: Optional[float] = None,
    tol: Optional[float] = None,
    dims: Optional[dict[str, int]] = None,
) -> dict[str, np.ndarray]:
    """Run ``g`` on host and reference and compare (see the module doc).

    ``expect`` is a numpy result computed independently (a dict by output
    name, or one array for a single-output graph); ``expect_tol`` its
    tolerance (default: the dtype tolerance). Returns the host outputs."""
    host, ref = compile_both(g, params, dims)
    assert_native(host, native)
    h_out = host.run(**inputs)
    r_out = ref.run(**inputs)
    assert h_out.keys() == r_out.keys()
    for name, h in h_out.items():
        t = tol if tol is not None else TOL.get(h.dtype, 1e-5)
        close(h, r_out[name], t, f"{name} host vs reference")
    if expect is not None:
        if not isinstance(expect, dict):
            assert len(h_out) == 1
            expect = {next(iter(h_out)): expect}
        for name, want in expect.items():
            t = expect_tol if expect_tol is not None else TOL.get(h_out[name].dtype, 1e-5)
            close(h_out[name], np.asarray(want), t, f"{name} host vs numpy")
            close(r_out[name], np.asarray(want), t, f"{name} reference vs numpy")
    return h_out


def one(out: dict[str, np.ndarray]) -> np.ndarray:
    """The single output of a run."""
    assert len(out) == 1
    return next(iter(out.values()))


# ------------------------------------------------------------ transformer
class Block:
    """Geometry of a llama-style decoder block: rmsnorm → q/k/v projections →
    NeoX RoPE → causal GQA attention → output projection → residual →
    rmsnorm → SwiGLU MLP → residual."""

    def __init__(self, width: int, heads: int, kv_heads: int, ffn: int, eps: float = 1e-6):
        assert width % heads == 0
        self.width, self.heads, self.kv_heads, self.ffn, self.eps = (
            width,
            heads,
            kv_heads,
            ffn,
            eps,
        )
        self.head_dim = width // heads

    def param_shapes(self) -> dict[str, list[int]]:
        """Shapes of one layer's params."""
        d, hd = self.width, self.head_dim
        return {
            "attn_norm": [d],
            "wq": [d, self.heads * hd],
            "wk": [d, self.kv_heads * hd],
            "wv": [d, self.kv_heads * hd],
            "wo": [self.heads * hd, d],
            "mlp_norm": [d],
            "w_gate": [d, self.ffn],
            "w_up": [d, self.ffn],
            "w_down": [self.ffn, d],
        }

    def params(self, rng: np.random.Generator, layer: int) -> dict[str, np.ndarray]:
        """Random weights of layer ``layer`` (scaled to keep activations O(1))."""
        out = {}
        for name, shape in self.param_shapes().items():
            if len(shape) == 1:
                v = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            else:
                v = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
            out[f"l{layer}.{name}"] = v
        return out

    def build(
        self, g: rlx.Graph, x: rlx.Node, cos: rlx.Node, sin: rlx.Node, layer: int
    ) -> rlx.Node:
        """Append one layer to ``g``; returns the new residual stream."""
        p = {n: g.param(f"l{layer}.{n}", s) for n, s in self.param_shapes().items()}
        h = g.rms_norm(x, p["attn_norm"], eps=self.eps)
        q = g.rope(g.matmul(h, p["wq"]), cos, sin, head_dim=self.head_dim)
        k = g.rope(g.matmul(h, p["wk"]), cos, sin, head_dim=self.head_dim)
        v = g.matmul(h, p["wv"])
        a = g.attention(
            q, k, v, heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, mask="causal"
        )
        x = g.add(x, g.matmul(a, p["wo"]))
        h = g.rms_norm(x, p["mlp_norm"], eps=self.eps)
        m = g.mul(g.silu(g.matmul(h, p["w_gate"])), g.matmul(h, p["w_up"]))
        return g.add(x, g.matmul(m, p["w_down"]), name=f"l{layer}.out")

    def numpy(
        self,
        x: np.ndarray,
        cos: np.ndarray,
        sin: np.ndarray,
        params: dict[str, np.ndarray],
        layer: int,
    ) -> np.ndarray:
        """The same layer in float64 numpy, written from the formulas."""
        w = {n: params[f"l{layer}.{n}"].astype(np.float64) for n in self.param_shapes()}
        b, s, _ = x.shape
        hd, half = self.head_dim, self.head_dim // 2

        def rms(t: np.ndarray, gamma: np.ndarray) -> np.ndarray:
            return t / np.sqrt((t * t).mean(-1, keepdims=True) + self.eps) * gamma

        def rope(t: np.ndarray) -> np.ndarray:  # [b, s, n, hd], rotate-half
            c, sn = cos[None, :, None, :], sin[None, :, None, :]
            a1, a2 = t[..., :half], t[..., half:]
            return np.concatenate([a1 * c - a2 * sn, a1 * sn + a2 * c], axis=-1)

        h = rms(x, w["attn_norm"])
        q = rope((h @ w["wq"]).reshape(b, s, self.heads, hd)).transpose(0, 2, 1, 3)
        k = rope((h @ w["wk"]).reshape(b, s, self.kv_heads, hd)).transpose(0, 2, 1, 3)
        v = (h @ w["wv"]).reshape(b, s, self.kv_heads, hd).transpose(0, 2, 1, 3)
        rep = self.heads // self.kv_heads
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        a = (pr @ v).transpose(0, 2, 1, 3).reshape(b, s, self.heads * hd)
        x = x + a @ w["wo"]
        h = rms(x, w["mlp_norm"])
        gate = h @ w["w_gate"]
        return x + (gate / (1 + np.exp(-gate)) * (h @ w["w_up"])) @ w["w_down"]


def rope_tables(seq: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """f32 cos / sin ``[seq, head_dim/2]`` of the usual RoPE frequencies."""
    inv = theta ** (-np.arange(0, head_dim, 2) / head_dim)
    ang = np.arange(seq)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def transformer(
    layers: int, block: Block, batch: int, seq: int, seed: int = 0
) -> tuple[rlx.Graph, dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """A ``layers``-deep stack: the graph, its params, its inputs and the
    float64 numpy result."""
    rng = np.random.default_rng(seed)
    g = rlx.Graph(f"transformer{layers}")
    x = g.input("x", [batch, seq, block.width])
    cos = g.input("cos", [seq, block.head_dim // 2])
    sin = g.input("sin", [seq, block.head_dim // 2])
    params: dict[str, np.ndarray] = {}
    y = x
    for i in range(layers):
        params.update(block.params(rng, i))
        y = block.build(g, y, cos, sin, i)
    g.outputs(y)
    cv, sv = rope_tables(seq, block.head_dim)
    xv = rng.standard_normal((batch, seq, block.width)).astype(np.float32)
    want = xv.astype(np.float64)
    for i in range(layers):
        want = block.numpy(want, cv.astype(np.float64), sv.astype(np.float64), params, i)
    return g, params, {"x": xv, "cos": cv, "sin": sv}, want
