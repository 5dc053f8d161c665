"""Cases of scripts/make_op_grad_fixtures.py for the fused and structured ops:
``fused_mat_mul_bias_act`` (each activation), ``fused_swiglu`` (both gate
orders), ``elementwise_region`` (a broadcasting chain; a round through f16),
``grouped_mat_mul``, ``dequant_mat_mul_t`` (Q8_0 by gguf-py, Q4_K random
blocks, both dequantised by gguf-py), ``fused_residual_ln`` /
``fused_residual_rms_norm`` (with and without bias / beta), SAM 2's
``axial_rope2d``, ``fused_attention_block`` (RoPE + causal, plain, custom
mask; torch's ``F.scaled_dot_product_attention``), ``scatter_elements`` /
``scatter_nd`` (``torch.scatter`` / ``index_put``), ``scan`` (an Elman step,
a reversed scan over two operands, two carries reversed) and the SPD ops
(``torch.linalg.eigh`` / ``matrix_exp``).

Imported by the main script after its own cases, which calls
:func:`register` with itself (its ``case`` / ``simple`` registration and
helpers), so these cases come after the older ones and leave their random
inputs unchanged.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

T = torch.Tensor
D = dict[str, T]
_rng = np.random.default_rng(1803)

#: fused_mat_mul_bias_act's epilogues, torch's own functions
ACTS: dict[str, Callable[[T], T]] = {
    "none": lambda z: z,
    "gelu": F.gelu,
    "gelu_approx": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def away(v: T, at: float | T, margin: float, what: str) -> None:
    """Assert ``v`` stays ``margin`` away from a kink / tie at ``at``."""
    gap = float((v.detach() - at).abs().min())
    assert gap > margin, f"{what}: {gap:.2e} from the kink"


def sym(x: T) -> T:
    return 0.5 * (x + x.transpose(-1, -2))


def eig_fn(x: T, f: Callable[[T], T]) -> T:
    """``U f(Λ) Uᵀ`` of ``sym(x)`` by ``torch.linalg.eigh``."""
    lam, u = torch.linalg.eigh(sym(x))
    return u @ torch.diag_embed(f(lam)) @ u.transpose(-1, -2)


def karcher(x: T) -> T:
    """Affine-invariant Karcher mean of SPD ``x [b, n, n]``: the fixed point
    ``G ← G^½ exp(mean_i log(G^{-½} X_i G^{-½})) G^½`` from the arithmetic
    mean (Moakher 2005), unrolled until the step vanishes in float64 (autograd
    through the iterations converges to the implicit derivative)."""
    g = x.mean(0)
    for _ in range(200):
        gh, gih = eig_fn(g, torch.sqrt), eig_fn(g, torch.rsqrt)
        step = eig_fn(gih @ x @ gih, torch.log).mean(0)
        g = sym(gh @ torch.linalg.matrix_exp(step) @ gh)
        if float(step.detach().norm()) < 1e-14:
            return g
    raise AssertionError("Karcher mean did not converge")


def spd_batch(b: int, lams: list[list[float]]) -> np.ndarray:
    """``b`` SPD matrices ``Q diag(λ) Qᵀ`` (random orthogonal Q), symmetric
    to the bit in f32."""
    out = []
    for i in range(b):
        lam = np.array(lams[i % len(lams)])
        q, _ = np.linalg.qr(_rng.standard_normal((lam.size, lam.size)))
        out.append((q * lam) @ q.T)
    a = np.stack(out)
    return (0.5 * (a + np.swapaxes(a, -1, -2))).astype(np.float32)


def q4k_blocks(n: int, k: int) -> np.ndarray:
    """Random Q4_K rows (gguf-py cannot quantise k-quants): random bytes with
    finite f16 ``d`` / ``dmin`` at bytes 0..4 of each 144-byte block."""
    nb = n * k // 256
    raw = _rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
    for o in (0, 2):
        s = _rng.uniform(0.01, 0.2, nb) * _rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n, -1)


def axial_rope2d(x: T, end_x: int, end_y: int, head_dim: int, heads: int, theta: float) -> T:
    """SAM 2's ``compute_axial_cis`` (frequencies and angles in f32 as SAM 2
    computes them) and ``apply_rotary_enc`` (interleaved pairs as complex
    numbers; ``repeat_freqs_k`` tiles the grid along the sequence)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 4)[: head_dim // 4].float() / head_dim))
    t = torch.arange(end_x * end_y, dtype=torch.float32)
    tx, ty = t % end_x, torch.div(t, end_x, rounding_mode="floor")
    ang = torch.cat([torch.outer(tx, freqs), torch.outer(ty, freqs)], -1).double()
    cis = torch.polar(torch.ones_like(ang), ang)
    b, s, hid = x.shape
    cis = cis.repeat(-(-s // cis.shape[0]), 1)[:s]
    xc = torch.view_as_complex(x.reshape(b, s, heads, head_dim // 2, 2))
    return torch.view_as_real(xc * cis[None, :, None, :]).reshape(b, s, hid)


def register(m: ModuleType) -> None:
    """Register the cases with the main script ``m``."""
    case, simple = m.case, m.simple

    # ------------------------------------------------ fused matmul / swiglu
    def _fmm(d: D, act: str) -> T:
        z = d["a"] @ d["w"] + d["bias"]
        if act == "relu":
            away(z, 0.0, 1e-3, "relu")
        return ACTS[act](z)

    for act in ACTS:
        simple(f"fused_mat_mul_bias_act_{act}", lambda d, a=act: _fmm(d, a),
               {"a": [2, 3, 4], "w": [4, 5], "bias": [5]})  # fmt: skip

    def _swiglu(x: T, gate_first: bool) -> T:
        lo, hi = x.chunk(2, -1)
        return F.silu(lo) * hi if gate_first else lo * F.silu(hi)

    simple("fused_swiglu", lambda d: _swiglu(d["x"], False), {"x": [2, 3, 8]})
    simple("fused_swiglu_gate_first", lambda d: _swiglu(d["x"], True), {"x": [3, 6]})

    # ------------------------------------------------------- elementwise region
    @case("elementwise_region_chain", {"x0": ([2, 3, 4], "normal"), "x1": ([3, 1], "normal"),
                                       "x2": ([4], "positive")}, ["x0", "x1", "x2"])  # fmt: skip
    def _region(d: D) -> T:
        s0 = d["x0"] * d["x1"]
        s2 = torch.sigmoid(s0) / d["x2"]
        away(s2 - d["x0"], 0.0, 1e-3, "max")
        s3 = torch.maximum(s2, d["x0"])
        s5 = s3 - torch.pow(d["x2"], d["x1"])
        return torch.atan(s5) * s0

    @case("elementwise_region_f16", {"x0": ([3, 5], "normal"), "x1": ([5], "normal")},
          ["x0", "x1"])  # fmt: skip
    def _region_f16(d: D) -> T:
        s1 = d["x0"].float().half().double()  # the round through f16: identity gradient
        return torch.exp(F.gelu(s1) * d["x1"])

    # ------------------------------------------------------- grouped / GGUF ᵀ
    case("grouped_mat_mul", {"x": ([5, 4], "normal"), "w": ([3, 4, 2], "normal")}, ["x", "w"],
         {"idx": np.array([2, 0, 2, 0, 2], np.int32)})(  # expert 1 unused: zero gradient
        lambda d: torch.einsum("mk,mkn->mn", d["x"], d["w"][d["idx"]]))  # fmt: skip
    case("dequant_mat_mul_t_q8_0", {"dy": ([2, 3, 5], "normal")}, ["dy"],
         {"w_q": m.gguf_weight("q8_0", 5, 64)})(
        lambda d: d["dy"] @ m.gguf_dense(d["w_q"], "q8_0").double())  # fmt: skip
    case("dequant_mat_mul_t_q4_k", {"dy": ([2, 3], "normal")}, ["dy"],
         {"w_q": q4k_blocks(3, 256)})(
        lambda d: d["dy"] @ m.gguf_dense(d["w_q"], "q4_k").double())  # fmt: skip

    # ---------------------------------------------------- residual norms
    simple("fused_residual_ln",
           lambda d: F.layer_norm(d["x"] + d["res"], (6,), d["gm"], d["bt"], eps=1e-5),
           {"x": [2, 3, 6], "res": [2, 3, 6], "gm": [6], "bt": [6]})  # fmt: skip
    simple("fused_residual_ln_bias",
           lambda d: F.layer_norm(d["x"] + d["res"] + d["b"], (6,), d["gm"], d["bt"], eps=1e-5),
           {"x": [3, 6], "res": [3, 6], "b": [6], "gm": [6], "bt": [6]})  # fmt: skip
    simple("fused_residual_rms_norm",
           lambda d: F.rms_norm(d["x"] + d["res"], (8,), d["gm"], eps=1e-6),
           {"x": [2, 3, 8], "res": [2, 3, 8], "gm": [8]})  # fmt: skip
    simple("fused_residual_rms_norm_bias_beta",
           lambda d: F.rms_norm(d["x"] + d["res"] + d["b"], (8,), d["gm"], eps=1e-5) + d["bt"],
           {"x": [3, 8], "res": [3, 8], "b": [8], "gm": [8], "bt": [8]})  # fmt: skip

    # --------------------------------------------------- axial RoPE / attention
    simple("axial_rope2d", lambda d: axial_rope2d(d["x"], 3, 2, 8, 2, 10000.0), {"x": [2, 6, 16]})
    simple("axial_rope2d_repeat", lambda d: axial_rope2d(d["x"], 2, 2, 8, 1, 100.0),
           {"x": [1, 12, 8]})  # fmt: skip

    def _block(d: D, heads: int, rope: bool, mask: str) -> T:
        """QKV projection, NeoX RoPE on q / k, SDPA by torch, output projection."""
        b, s, _ = d["x"].shape
        inner = d["w_out"].shape[0]
        hd = inner // heads
        q, k, v = (d["x"] @ d["w_qkv"]).split(inner, -1)
        if rope:
            q = m.rope(q, d["cos"], d["sin"], hd, hd, False)
            k = m.rope(k, d["cos"], d["sin"], hd, hd, False)
        q, k, v = (t.reshape(b, s, heads, hd).transpose(1, 2) for t in (q, k, v))
        am = d["mask"] != 0 if mask == "custom" else None  # broadcast to [b, heads, s, s]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=am, is_causal=mask == "causal")
        return o.transpose(1, 2).reshape(b, s, inner) @ d["w_out"]

    _trig = {"cos": ([4, 2], "angle_cos"), "sin": ([4, 2], "angle_sin")}
    _w = {"x": ([2, 4, 8], "normal"), "w_qkv": ([8, 24], "normal"), "w_out": ([8, 8], "normal")}
    case("fused_attention_block_rope_causal", {**_w, **_trig}, ["x", "w_qkv", "w_out"])(
        lambda d: _block(d, 2, True, "causal")
    )
    simple("fused_attention_block_plain", lambda d: _block(d, 3, False, "none"),
           {"x": [1, 5, 6], "w_qkv": [6, 18], "w_out": [6, 6]})  # fmt: skip
    _mask = np.array([[[1, 0, 0, 1], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 1]],
                      [[1, 1, 1, 1], [0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]]],
                     np.float32)[:, None]  # fmt: skip
    case("fused_attention_block_rope_mask", {**_w, **_trig, "mask": ([2, 1, 4, 4], _mask)},
         ["x", "w_qkv", "w_out"])(lambda d: _block(d, 2, True, "custom"))  # fmt: skip

    # --------------------------------------------------------------- scatter
    case("scatter_elements_axis0", {"data": ([4, 3], "normal"), "upd": ([2, 3], "normal")},
         ["data", "upd"], {"idx": np.array([[1, 3, 0], [2, 0, 3]], np.int32)})(
        lambda d: d["data"].scatter(0, d["idx"], d["upd"]))  # fmt: skip
    _ie = np.array([[[4, 1], [0, 2], [3, 0]], [[2, 3], [1, 4], [0, 2]]], np.int32)
    case("scatter_elements_last_axis", {"data": ([2, 3, 5], "normal"),
                                        "upd": ([2, 3, 2], "normal")},
         ["data", "upd"], {"idx": _ie})(
        lambda d: d["data"].scatter(-1, d["idx"], d["upd"]))  # fmt: skip
    case("scatter_nd_rows", {"data": ([5, 3], "normal"), "upd": ([2, 3], "normal")},
         ["data", "upd"], {"idx": np.array([[3], [0]], np.int32)})(
        lambda d: d["data"].index_put((d["idx"][:, 0],), d["upd"]))  # fmt: skip
    case("scatter_nd_elements", {"data": ([3, 4], "normal"), "upd": ([3], "normal")},
         ["data", "upd"], {"idx": np.array([[0, 1], [2, 3], [1, -1]], np.int32)})(
        lambda d: d["data"].index_put((d["idx"][:, 0], d["idx"][:, 1]), d["upd"]))  # fmt: skip

    # ------------------------------------------------------------------ scan
    @case("scan_elman", {"h0": ([2, 4], "normal"), "w": ([4, 4], "normal"),
                         "xs": ([5, 2, 4], "normal")}, ["h0", "w", "xs"])  # fmt: skip
    def _scan_elman(d: D) -> T:
        """Carries h and the weight (passed through); y = the new h."""
        h, ys = d["h0"], []
        for x in d["xs"]:
            h = torch.tanh(h @ (0.5 * d["w"]) + x)
            ys.append(h)
        return torch.stack(ys)

    @case("scan_reverse_two_xs", {"c0": ([3], "normal"), "xs": ([4, 3], "normal"),
                                  "ws": ([4, 3], "normal")}, ["c0", "xs", "ws"])  # fmt: skip
    def _scan_rev(d: D) -> T:
        """From the last slot: c ← tanh(c·w + sin x), y = c_new·x + c."""
        c, ys = d["c0"], [None] * 4
        for i in range(3, -1, -1):
            x, w = d["xs"][i], d["ws"][i]
            cn = torch.tanh(c * w + torch.sin(x))
            ys[i], c = cn * x + c, cn
        return torch.stack(ys)

    @case("scan_two_carries_reverse",
          {"h0": ([2, 3], "normal"), "s0": ([3], "normal"), "xs": ([4, 2, 3], "normal")},
          ["h0", "s0", "xs"])  # fmt: skip
    def _scan_two(d: D) -> T:
        """Carries h [2, 3] and s [3], from the last slot: f = σ(x + h),
        h ← f·tanh(x − h) + (1 − f)·h·s, s ← 0.9·s + mean_rows(h_new), y = h_new·s_new."""
        h, s, ys = d["h0"], d["s0"], [None] * 4
        for i in range(3, -1, -1):
            x = d["xs"][i]
            f = torch.sigmoid(x + h)
            h = f * torch.tanh(x - h) + (1 - f) * h * s
            s = 0.9 * s + h.mean(0)
            ys[i] = h * s
        return torch.stack(ys)

    # ------------------------------------------------------------------- SPD
    _bx = spd_batch(2, [[0.4, 0.9, 1.3, 2.1], [0.6, 1.0, 1.8, 2.5]])
    case("spd_bi_map", {"x": ([2, 4, 4], _bx), "w": ([4, 3], "normal")}, ["x", "w"])(
        lambda d: d["w"].T @ d["x"] @ d["w"]
    )
    eps = float(np.float32(0.6))
    case("spd_re_eig", {"x": ([2, 3, 3], spd_batch(2, [[0.3, 0.95, 1.7], [0.45, 0.8, 1.4]]))},
         ["x"])(lambda d: eig_fn(d["x"], lambda v: v.clamp(min=eps)))  # fmt: skip
    case("spd_log_eig", {"x": ([2, 3, 3], spd_batch(2, [[0.5, 1.1, 2.0], [0.7, 1.3, 2.6]]))},
         ["x"])(lambda d: eig_fn(d["x"], torch.log))  # fmt: skip
    _kx = spd_batch(3, [[0.6, 1.0, 1.5], [0.8, 1.3, 2.2], [0.5, 1.2, 1.9]])
    case("spd_karcher_mean", {"x": ([3, 3, 3], _kx)}, ["x"])(lambda d: karcher(sym(d["x"])))

    @case("spd_batch_norm", {"x": ([3, 3, 3], _kx), "bias": ([3, 3], spd_batch(1, [[0.7, 1.1,
                                                                                    1.6]])[0])},
          ["x"])  # fmt: skip
    def _spd_bn(d: D) -> T:
        """``sym(B^½ G^{-½} X_i G^{-½} B^½)``, G the Karcher mean (bias frozen)."""
        x = sym(d["x"])
        gih = eig_fn(karcher(x), torch.rsqrt)
        bh = eig_fn(d["bias"], torch.sqrt)
        return sym(bh @ gih @ x @ gih @ bh)
