"""fuse_decode_mlp / fuse_decode_mlp_combined_gate_up on hand-built decode
MLPs (one token): with the passes on the schedule holds the fused thunks,
runs them natively (no fallback), and its outputs equal the unfused
schedule's (RLX_DISABLE_PASS) and the float64 numpy reference.

Tolerance. The fused kernels compute row for row the same dots as the
unfused GEMVs, so pass on vs off is compared at 1e-6 of the output scale
(they are in fact identical). Against numpy, the formats with integer-dot
kernels round each block of 32 activations to 8 bits (``dx = max|x| /
127``), moving a GEMV output by at most ``½ Σ_e |W[j, e]|·dx(e)`` — the
bound of the existing VNNI tests — plus ``1e-4`` of the output scale for f32
vs f64 accumulation. The gating turns gate / up errors ``εg, εu`` into at
most ``1.13·εg·(|u| + εu) + |act(g)|·εu`` (1.13 bounds |silu'| and
|gelu_tanh'|).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants
from rlx.reference.gguf_blocks import GEOMETRY, dequantize_rows, row_bytes

SEP, COMB = "fuse_decode_mlp", "fuse_decode_mlp_combined_gate_up"
TOL = 1e-4
LIP = 1.13
INT_DOT = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}
TYPES = sorted(INT_DOT | {"f16", "f32"})
_QUANTIZE = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q8_0": T.Q8_0}
_F16_SCALES = {"q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}


def packed(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, row_bytes(k)]`` packed rows: gguf's quantizer where it has one,
    else random blocks with finite f16 scales."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    if typ == "f32":
        return w.view(np.uint8).reshape(n, -1)
    if typ == "f16":
        return w.astype(np.float16).view(np.uint8).reshape(n, -1)
    if typ in _QUANTIZE:
        return np.ascontiguousarray(quants.quantize(w, _QUANTIZE[typ]), np.uint8)
    bs, bb = GEOMETRY[typ]
    nb = n * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in _F16_SCALES[typ]:
        s = rng.uniform(0.01, 0.1, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n, row_bytes(typ, k))


def gemv_ref(typ: str, wq: np.ndarray, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``W @ x`` and its rounding bound (zero without integer dots)."""
    wf = dequantize_rows(wq, typ, k).astype(np.float64)
    y = wf @ x.astype(np.float64)
    if typ not in INT_DOT:
        return y, np.zeros_like(y)
    dx = np.repeat(np.abs(x.astype(np.float64)).reshape(-1, 32).max(axis=1) / 127.0, 32)
    return y, 0.5 * np.abs(wf) @ dx


def act_ref(gelu: bool, v: np.ndarray) -> np.ndarray:
    if gelu:
        return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))
    return v * 0.5 * (1.0 + np.tanh(0.5 * v))  # v·sigmoid(v), no overflow


def mlp_graph(
    k: int, n: int, wrb: int, drb: int, typ: str, gelu: bool, packed_gu: bool
) -> rlx.Graph:
    """``p = act(gate(x))·up(x)``, ``out = h + down(p)``; outputs p and out."""
    g = rlx.Graph("mlp")
    x = g.input("x", [1, 1, k])
    h = g.input("h", [1, 1, k])
    if packed_gu:
        c = g.dequant_matmul(x, g.param("wgu", [2 * n, wrb], "u8"), scheme=typ, n=2 * n, k=k)
        gate, up = g.narrow(c, -1, 0, n), g.narrow(c, -1, n, n)
    else:
        gate = g.dequant_matmul(x, g.param("wg", [n, wrb], "u8"), scheme=typ, n=n, k=k)
        up = g.dequant_matmul(x, g.param("wu", [n, wrb], "u8"), scheme=typ, n=n, k=k)
    p = g.mul(g.gelu_approx(gate) if gelu else g.silu(gate), up, name="p")
    d = g.dequant_matmul(p, g.param("wd", [k, drb], "u8"), scheme=typ, n=k, k=n)
    g.outputs(p, g.add(h, d, name="out"))
    return g


def run(g: rlx.Graph, mp: pytest.MonkeyPatch, disable: str, params: dict, feeds: dict) -> tuple:
    mp.setenv("RLX_DISABLE_PASS", disable)
    exe = rlx.compile(g)
    for name, val in params.items():
        exe.set_param(name, val)
    out = exe.run(**feeds)
    return exe, out["p"].reshape(-1), out["out"].reshape(-1)


def scaled_close(a: np.ndarray, b: np.ndarray, rel: float) -> None:
    scale = float(np.max(np.abs(b)))
    assert float(np.max(np.abs(a.astype(np.float64) - b))) <= rel * scale


def check_block(mp: pytest.MonkeyPatch, typ: str, gelu: bool, packed_gu: bool, seed: int) -> None:
    bs = GEOMETRY[typ][0]
    k, n = (256, 512) if bs == 256 else (96, 160)
    rng = np.random.default_rng(seed)
    wg, wu, wd = packed(typ, n, k, rng), packed(typ, n, k, rng), packed(typ, k, n, rng)
    params = {"wgu": np.concatenate([wg, wu])} if packed_gu else {"wg": wg, "wu": wu}
    params["wd"] = wd
    x = rng.standard_normal(k).astype(np.float32)
    h = rng.standard_normal(k).astype(np.float32)
    feeds = {"x": x.reshape(1, 1, k), "h": h.reshape(1, 1, k)}
    g = mlp_graph(k, n, wg.shape[1], wd.shape[1], typ, gelu, packed_gu)
    name = COMB if packed_gu else SEP
    on, p_on, o_on = run(g, mp, "", params, feeds)
    off, p_off, o_off = run(g, mp, f"{SEP},{COMB}", params, feeds)
    assert on.stats["pass_matches"][name] == 1
    assert off.stats["pass_matches"][name] == -1
    assert on.stats["fallback_thunks"] == 0, on.stats
    fused = "fused_mlp_gate_up_gelu" if gelu else "fused_mlp_gate_up_swiglu"
    assert fused in on.schedule and "fused_mlp_down_residual" in on.schedule
    assert fused not in off.schedule
    # gate, up (or the packed GEMV) and the gating (act + mul, or the one
    # elementwise region the graph fusions make of them) → 1; down, add → 1
    assert on.stats["dispatches"] == 2
    assert off.stats["dispatches"] >= 4
    scaled_close(p_on, p_off.astype(np.float64), 1e-6)
    scaled_close(o_on, o_off.astype(np.float64), 1e-6)
    # p against float64 numpy
    (gr, eg), (ur, eu) = gemv_ref(typ, wg, x, k), gemv_ref(typ, wu, x, k)
    want = act_ref(gelu, gr) * ur
    eg, eu = eg + TOL * np.abs(gr).max(), eu + TOL * np.abs(ur).max()
    bound = LIP * eg * (np.abs(ur) + eu) + np.abs(act_ref(gelu, gr)) * eu + TOL * np.abs(want).max()
    assert np.all(np.abs(p_on - want) <= bound)
    # out = h + down(p) against float64 numpy on the host's p
    dr, ed = gemv_ref(typ, wd, p_on, n)
    want_o = h.astype(np.float64) + dr
    assert np.all(np.abs(o_on - want_o) <= ed + TOL * (np.abs(dr).max() + np.abs(h).max()))


@pytest.mark.parametrize("typ", TYPES)
def test_swiglu_block_every_type(monkeypatch: pytest.MonkeyPatch, typ: str) -> None:
    check_block(monkeypatch, typ, gelu=False, packed_gu=False, seed=TYPES.index(typ))


@pytest.mark.parametrize("typ", ["q4_1", "q4_k", "q6_k", "q8_0", "f16"])
def test_gelu_block(monkeypatch: pytest.MonkeyPatch, typ: str) -> None:
    check_block(monkeypatch, typ, gelu=True, packed_gu=False, seed=100 + TYPES.index(typ))


@pytest.mark.parametrize("typ", ["q4_k", "q5_0", "q8_0"])
@pytest.mark.parametrize("gelu", [False, True])
def test_combined_gate_up(monkeypatch: pytest.MonkeyPatch, typ: str, gelu: bool) -> None:
    check_block(monkeypatch, typ, gelu=gelu, packed_gu=True, seed=200 + TYPES.index(typ))


def test_refuses_when_the_gate_is_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    k, n, typ = 64, 96, "q8_0"
    rb = row_bytes(typ, k)
    g = rlx.Graph("gate_out")
    x = g.input("x", [1, 1, k])
    gate = g.dequant_matmul(x, g.param("wg", [n, rb], "u8"), scheme=typ, n=n, k=k, name="gate")
    up = g.dequant_matmul(x, g.param("wu", [n, rb], "u8"), scheme=typ, n=n, k=k)
    g.outputs(g.mul(g.silu(gate), up), gate)
    monkeypatch.setenv("RLX_DISABLE_PASS", "")
    exe = rlx.compile(g)
    assert exe.stats["pass_matches"][SEP] == 0
    assert "fused_mlp" not in exe.schedule


def test_refuses_prefill(monkeypatch: pytest.MonkeyPatch) -> None:
    k, n, typ = 64, 96, "q8_0"
    rb = row_bytes(typ, k)
    g = rlx.Graph("prefill")
    x = g.input("x", [1, 4, k])
    gate = g.dequant_matmul(x, g.param("wg", [n, rb], "u8"), scheme=typ, n=n, k=k)
    up = g.dequant_matmul(x, g.param("wu", [n, rb], "u8"), scheme=typ, n=n, k=k)
    g.outputs(g.mul(g.silu(gate), up))
    monkeypatch.setenv("RLX_DISABLE_PASS", "")
    assert rlx.compile(g).stats["pass_matches"][SEP] == 0
