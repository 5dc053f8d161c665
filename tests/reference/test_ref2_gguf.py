"""GGUF block decoders and the GGUF matmul thunks.

Oracle: ``gguf.quants.dequantize`` (independent numpy implementation) for every
type it decodes; explicit per-weight loops for Q8_1, Q8_K and the seed's Q1_0 /
Q2_0. Decoders must match the oracle exactly (same float32 formulas); matmuls
compare at f32 rtol/atol 1e-5 (f16 outputs 1e-2).
"""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena
from gguf import GGMLQuantizationType as T
from gguf import quants
from rlx.reference import run_thunk
from rlx.reference.gguf_blocks import GEOMETRY, dequantize_blocks, dequantize_rows, row_bytes

# f16 fields (byte offsets) that hold scales: randomised to sane values (no NaN/Inf).
SCALE_OFFSETS = {
    "q4_0": [0],
    "q4_1": [0, 2],
    "q5_0": [0],
    "q5_1": [0, 2],
    "q8_0": [0],
    "q8_1": [0, 2],
    "q2_k": [80, 82],
    "q3_k": [108],
    "q4_k": [0, 2],
    "q5_k": [0, 2],
    "q6_k": [208],
    "q1_0": [0],
    "q2_0": [0],
}
GGUF_DECODES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]


def random_blocks(typ: str, nb: int, rng: np.random.Generator) -> np.ndarray:
    """Random block bytes with finite f16 scales in ±[0.01, 2]."""
    bs, bb = GEOMETRY[typ]
    if typ in ("f32", "f16", "bf16"):
        x = rng.standard_normal(nb).astype(np.float32)
        if typ == "f16":
            return x.astype(np.float16).view(np.uint8).reshape(nb, bb)
        if typ == "bf16":
            return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nb, bb)
        return x.view(np.uint8).reshape(nb, bb)
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALE_OFFSETS.get(typ, []):
        s = rng.uniform(0.01, 2.0, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    if typ == "q8_k":
        raw[:, 0:4] = rng.uniform(0.01, 2.0, nb).astype(np.float32).view(np.uint8).reshape(nb, 4)
    return raw


@pytest.mark.parametrize("typ", GGUF_DECODES + ["f32", "f16", "bf16"])
def test_decoder_matches_gguf(typ: str) -> None:
    rng = np.random.default_rng(hash(typ) % 2**32)
    bs, bb = GEOMETRY[typ]
    nb = 37 if bs > 1 else 37 * 32
    raw = random_blocks(typ, nb, rng)
    ours = dequantize_blocks(raw, typ)
    ref = quants.dequantize(raw.reshape(-1), T[typ.upper()]).reshape(-1).astype(np.float32)
    assert ours.dtype == np.float32 and ours.shape == (nb * bs,)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("typ", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16"])
def test_quantize_roundtrip(typ: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 96)).astype(np.float32)
    packed = quants.quantize(x, T[typ.upper()])
    ours = dequantize_rows(packed, typ, 96)
    ref = quants.dequantize(packed, T[typ.upper()])
    np.testing.assert_array_equal(ours, ref)
    # the round trip is close to the source (coarse: 4-bit step ~ amax/8)
    assert np.max(np.abs(ours - x)) < 0.35


def _f16(b: np.ndarray) -> float:
    return float(np.frombuffer(bytes(b), np.float16)[0])


def test_q8_1_and_q8_k_loops() -> None:
    rng = np.random.default_rng(3)
    raw = random_blocks("q8_1", 4, rng)
    got = dequantize_blocks(raw, "q8_1").reshape(4, 32)
    for b in range(4):
        d = _f16(raw[b, 0:2])
        for i in range(32):
            q = int(np.int8(raw[b, 4 + i]))
            assert got[b, i] == np.float32(d) * np.float32(q)
    raw = random_blocks("q8_k", 3, rng)
    got = dequantize_blocks(raw, "q8_k").reshape(3, 256)
    for b in range(3):
        d = float(np.frombuffer(bytes(raw[b, 0:4]), np.float32)[0])
        for i in range(256):
            assert got[b, i] == np.float32(d) * np.float32(int(np.int8(raw[b, 4 + i])))


def test_q1_0_loop() -> None:
    rng = np.random.default_rng(4)
    raw = random_blocks("q1_0", 5, rng)
    got = dequantize_blocks(raw, "q1_0").reshape(5, 128)
    for b in range(5):
        d = np.float32(_f16(raw[b, 0:2]))
        for i in range(128):
            bit = (int(raw[b, 2 + i // 8]) >> (i % 8)) & 1
            assert got[b, i] == (d if bit else -d)


def test_q2_0_loop() -> None:
    rng = np.random.default_rng(5)
    raw = random_blocks("q2_0", 5, rng)
    got = dequantize_blocks(raw, "q2_0").reshape(5, 128)
    for b in range(5):
        d = np.float32(_f16(raw[b, 0:2]))
        for i in range(128):
            code = (int(raw[b, 2 + i // 4]) >> (2 * (i % 4))) & 3
            assert got[b, i] == d * np.float32(code - 1.5)


def test_row_bytes() -> None:
    assert row_bytes("q4_k", 512) == 288
    assert row_bytes("q1_0", 256) == 36
    with pytest.raises(ValueError):
        row_bytes("q4_k", 100)


def _packed(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    bs, bb = GEOMETRY[typ]
    return random_blocks(typ, n * k // bs, rng).reshape(n, row_bytes(typ, k))


def _oracle_rows(packed: np.ndarray, typ: str) -> np.ndarray:
    if typ in GGUF_DECODES + ["f32", "f16", "bf16"]:
        return quants.dequantize(packed, T[typ.upper()]).astype(np.float64)
    return dequantize_rows(packed, typ, packed.shape[1] // GEOMETRY[typ][1] * GEOMETRY[typ][0])


@pytest.mark.parametrize(
    "typ", GGUF_DECODES + ["q8_1", "q8_k", "q1_0", "q2_0", "f16", "bf16", "f32"]
)
@pytest.mark.parametrize("f16io", [False, True])
def test_dequant_matmul_gguf(typ: str, f16io: bool) -> None:
    rng = np.random.default_rng(11)
    bs = GEOMETRY[typ][0]
    k = 256 if bs == 256 else (128 if bs == 128 else 64)
    m, n = 3, 5
    w = _packed(typ, n, k, rng)
    # small activations keep f16 outputs finite (Q6_K / Q3_K weights reach ~8000)
    x = (rng.standard_normal((m, k)) * (1e-3 if f16io else 1.0)).astype(
        np.float16 if f16io else np.float32
    )
    a = Arena()
    xo, wo = a.put(x), a.weight(w)
    do = a.out((m, n), np.float16 if f16io else np.float32)
    mem = a.build()
    t = dict(
        name="dequant_matmul_gguf",
        x=xo,
        w_q=wo,
        dst=do,
        m=m,
        k=k,
        n=n,
        scheme={"gguf": typ},
        x_f16=f16io,
        dst_f16=f16io,
    )
    run_thunk(t, mem)
    want = x.astype(np.float64) @ _oracle_rows(w, typ).T
    got = a.read(do, (m, n), np.float16 if f16io else np.float32).astype(np.float64)
    tol = 1e-2 if f16io else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_dequant_grouped_matmul_gguf() -> None:
    rng = np.random.default_rng(12)
    e, n, k, m = 3, 7, 64, 6
    typ = "q5_1"
    stack = np.stack([_packed(typ, n, k, rng) for _ in range(e)])
    x = rng.standard_normal((m, k)).astype(np.float32)
    idx = np.array([2, 0, 1, 2, 5, 0], np.int32)  # 5 is out of range -> zero row
    a = Arena()
    xo, io, wo, do = a.put(x), a.put(idx), a.weight(stack), a.out((m, n))
    mem = a.build()
    run_thunk(
        dict(
            name="dequant_grouped_matmul_gguf",
            input=xo,
            w_q=wo,
            expert_idx=io,
            dst=do,
            m=m,
            k_dim=k,
            n=n,
            num_experts=e,
            scheme={"gguf": typ},
        ),
        mem,
    )
    got = a.read(do, (m, n))
    for i in range(m):
        if idx[i] >= e:
            np.testing.assert_array_equal(got[i], 0)
        else:
            want = quants.dequantize(stack[idx[i]], T.Q5_1).astype(np.float64) @ x[i].astype(
                np.float64
            )
            np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-5)


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))


@pytest.mark.parametrize("typ", ["q4_k", "q5_0", "q6_k", "q1_0", "q2_0"])
@pytest.mark.parametrize("f16io", [False, True])
def test_fused_mlp(typ: str, f16io: bool) -> None:
    rng = np.random.default_rng(13)
    k, n = 256, 9
    gw, uw, dw = _packed(typ, n, k, rng), _packed(typ, n, k, rng), _packed(typ, 5, 256, rng)
    xdt = np.float16 if f16io else np.float32
    x = (rng.standard_normal(k) * 1e-3).astype(xdt)
    h = (rng.standard_normal(256) * 1e-3).astype(xdt)
    res = rng.standard_normal(5).astype(xdt)
    a = Arena()
    xo, ho, ro = a.put(x), a.put(h), a.put(res)
    go, uo, wo = a.weight(gw), a.weight(uw), a.weight(dw)
    o1, o2, o3 = a.out(n, xdt), a.out(n, np.float32), a.out(5, xdt)
    mem = a.build()
    sch = {"gguf": typ}
    run_thunk(
        dict(
            name="fused_mlp_gate_up_swiglu",
            x=xo,
            gate_w=go,
            up_w=uo,
            dst=o1,
            k=k,
            n=n,
            scheme=sch,
            x_f16=f16io,
            dst_f16=f16io,
        ),
        mem,
    )
    run_thunk(
        dict(
            name="fused_mlp_gate_up_gelu",
            x=xo,
            gate_w=go,
            up_w=uo,
            dst=o2,
            k=k,
            n=n,
            scheme=sch,
            x_f16=f16io,
        ),
        mem,
    )
    run_thunk(
        dict(
            name="fused_mlp_down_residual",
            x=ho,
            w=wo,
            res=ro,
            dst=o3,
            k=256,
            n=5,
            scheme=sch,
            x_f16=f16io,
            dst_f16=f16io,
            res_f16=f16io,
        ),
        mem,
    )
    xf = x.astype(np.float64)
    g = _oracle_rows(gw, typ) @ xf
    u = _oracle_rows(uw, typ) @ xf
    tol = 1e-2 if f16io else 1e-5
    np.testing.assert_allclose(a.read(o1, n, xdt), g / (1 + np.exp(-g)) * u, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.read(o2, n), _gelu_tanh(g) * u, rtol=tol, atol=tol)
    want = res.astype(np.float64) + _oracle_rows(dw, typ) @ h.astype(np.float64)
    np.testing.assert_allclose(a.read(o3, 5, xdt), want, rtol=tol, atol=tol)
