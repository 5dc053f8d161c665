"""KV-cache decoding ops, host vs reference vs plain numpy: attention with a
run-time key length (``kv_len``) over a fixed-capacity cache — decode
(s = 1) and padded prefill (s = B), GQA, causal / sliding window / none,
softcap, BSHD and BHSD, f32 and f16 — and a decode loop whose State caches
are written in place by ``scatter_nd`` and read by attention, checked step by
step against full-sequence causal attention. Cache rows past ``kv_len`` hold
NaN, so any read of them would show.

Errors: ``kv_len`` beyond the cache at run time (KernelError naming the
thunk), a State leaf with a second consumer next to its in-place scatter
(compile error naming the node), and out-of-range scatter rows."""

from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np
import pytest
import rlx
from _harness2 import check, compile_both, rand
from test_parity_attention import np_sdpa

DTS = {"f32": np.float32, "f16": np.float16}


def _bhsd(x: np.ndarray, nh: int, d: int, layout: str) -> np.ndarray:
    x = x.astype(np.float64)
    if layout == "bhsd":
        return x
    return x.reshape(x.shape[0], x.shape[1], nh, d).transpose(0, 2, 1, 3)


def _dyn_case(
    *,
    s: int,
    cap: int,
    kv_len: int,
    h: int,
    kvh: int,
    d: int,
    layout: str = "bshd",
    mask: Optional[str] = "causal",
    window: int = 0,
    softcap: Optional[float] = None,
    dt: str = "f32",
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    npdt = DTS[dt]
    b = 1
    qs = [b, s, h * d] if layout == "bshd" else [b, h, s, d]
    ks = [b, cap, kvh * d] if layout == "bshd" else [b, kvh, cap, d]
    g = rlx.Graph("dyn_attn")
    q, k, v = g.input("q", qs, dt), g.input("k", ks, dt), g.input("v", ks, dt)
    n = g.input("n", [1], "i32")
    g.outputs(
        g.attention(
            q,
            k,
            v,
            heads=h,
            kv_heads=kvh,
            head_dim=d,
            mask=mask,
            window=window,
            layout=layout,
            softcap=softcap,
            kv_len=n,
            name="y",
        )
    )
    qv, kv_, vv = rand(rng, qs, npdt), rand(rng, ks, npdt), rand(rng, ks, npdt)
    # rows past kv_len are unwritten cache: NaN must never reach the output
    if layout == "bshd":
        kv_[:, kv_len:], vv[:, kv_len:] = np.nan, np.nan
    else:
        kv_[:, :, kv_len:], vv[:, :, kv_len:] = np.nan, np.nan
    kq, vq = _bhsd(kv_, kvh, d, layout)[:, :, :kv_len], _bhsd(vv, kvh, d, layout)[:, :, :kv_len]
    qp = (kv_len - s + np.arange(s))[:, None]
    kp = np.arange(kv_len)[None, :]
    allowed = None
    if mask == "causal" and window == 0:
        allowed = kp <= qp
    elif mask in ("causal", "sliding_window"):
        allowed = (kp <= qp) & (qp - kp <= window)
    o = np_sdpa(
        _bhsd(qv, h, d, layout), kq, vq, scale=1 / math.sqrt(d), allowed=allowed, softcap=softcap
    )
    want = o if layout == "bhsd" else o.transpose(0, 2, 1, 3).reshape(qs)
    feeds = {"q": qv, "k": kv_, "v": vv, "n": np.array([kv_len], np.int32)}
    check(g, feeds, native=["attention"], expect=want)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kv_len", [1, 9, 24])
@pytest.mark.parametrize("h,kvh,d", [(9, 3, 16), (14, 2, 8), (4, 1, 32)])
def test_decode_kv_len(layout: str, dt: str, kv_len: int, h: int, kvh: int, d: int) -> None:
    _dyn_case(s=1, cap=24, kv_len=kv_len, h=h, kvh=kvh, d=d, layout=layout, dt=dt, seed=kv_len + h)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize(
    "mask,window,softcap",
    [
        ("causal", 0, None),
        ("causal", 3, None),
        ("none", 0, None),
        ("causal", 0, 5.0),
        ("sliding_window", 512, 30.0),
    ],
)
@pytest.mark.parametrize("kv_len", [1, 9, 16])
def test_decode_masks_and_softcap(
    layout: str, mask: str, window: int, softcap: Optional[float], kv_len: int
) -> None:
    _dyn_case(
        s=1,
        cap=16,
        kv_len=kv_len,
        h=4,
        kvh=2,
        d=8,
        layout=layout,
        mask=mask,
        window=window,
        softcap=softcap,
        seed=kv_len,
    )


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kv_len,window", [(6, 0), (11, 0), (11, 4), (16, 2)])
def test_prefill_kv_len(layout: str, dt: str, kv_len: int, window: int) -> None:
    # a padded prefill bucket (s = 6) over a 16-row cache holding kv_len rows
    _dyn_case(
        s=6,
        cap=16,
        kv_len=kv_len,
        h=6,
        kvh=2,
        d=8,
        layout=layout,
        dt=dt,
        window=window,
        seed=kv_len * 3 + window,
    )


# ----------------------------------------------------------- decode loop


def _kv_graph(s: int, cap: int, h: int, kvh: int, d: int) -> rlx.Graph:
    """One decoder attention step: write ``s`` new K/V rows at ``pos`` into
    State caches ``[cap, kvh·d]``, attend over the first ``n`` rows."""
    kvd = kvh * d
    g = rlx.Graph(f"kv_step_{s}")
    kc, vc = g.state("kc", [cap, kvd]), g.state("vc", [cap, kvd])
    q = g.input("q", [1, s, h * d])
    kn, vn = g.input("k_new", [s, kvd]), g.input("v_new", [s, kvd])
    pos, n = g.input("pos", [s, 1], "i32"), g.input("n", [1], "i32")
    kc2 = g.scatter_nd(kc, pos, kn, name="kc_write")
    vc2 = g.scatter_nd(vc, pos, vn, name="vc_write")
    kview, vview = g.reshape(kc2, [1, cap, kvd]), g.reshape(vc2, [1, cap, kvd])
    g.outputs(g.attention(q, kview, vview, heads=h, kv_heads=kvh, head_dim=d, kv_len=n, name="y"))
    return g


def _full_causal(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, h: int, kvh: int, d: int
) -> np.ndarray:
    """Causal attention over a whole sequence: q ``[T, h·d]``, k/v ``[T, kvh·d]``."""
    t = q.shape[0]
    qb = q.reshape(1, t, h, d).transpose(0, 2, 1, 3).astype(np.float64)
    kb = k.reshape(1, t, kvh, d).transpose(0, 2, 1, 3).astype(np.float64)
    vb = v.reshape(1, t, kvh, d).transpose(0, 2, 1, 3).astype(np.float64)
    allowed = np.arange(t)[None, :] <= np.arange(t)[:, None]
    o = np_sdpa(qb, kb, vb, scale=1 / math.sqrt(d), allowed=allowed)
    return o.transpose(0, 2, 1, 3).reshape(t, h * d)


def test_prefill_then_decode_loop_matches_full_causal() -> None:
    h, kvh, d, cap, p, steps = 6, 2, 8, 16, 5, 7
    kvd = kvh * d
    rng = np.random.default_rng(4)
    total = p + steps
    q_all = rng.standard_normal((total, h * d)).astype(np.float32)
    k_all = rng.standard_normal((total, kvd)).astype(np.float32)
    v_all = rng.standard_normal((total, kvd)).astype(np.float32)
    want = _full_causal(q_all, k_all, v_all, h, kvh, d)

    pre_h, pre_r = compile_both(_kv_graph(p, cap, h, kvh, d))
    dec_h, dec_r = compile_both(_kv_graph(1, cap, h, kvh, d))
    for exe in (pre_h, pre_r, dec_h, dec_r):
        exe.set_state("kc", np.full((cap, kvd), np.nan, np.float32))
        exe.set_state("vc", np.full((cap, kvd), np.nan, np.float32))
    fb = pre_h.stats["fallback_by_thunk"]
    assert fb.get("cpu_indexing", 0) == 0 and fb.get("attention", 0) == 0, fb
    pos = np.arange(p, dtype=np.int32)[:, None]
    feeds = {
        "q": q_all[None, :p],
        "k_new": k_all[:p],
        "v_new": v_all[:p],
        "pos": pos,
        "n": np.array([p], np.int32),
    }
    for exe, dec in ((pre_h, dec_h), (pre_r, dec_r)):
        y = exe.run(**feeds)["y"]
        np.testing.assert_allclose(y[0], want[:p], atol=1e-5, rtol=1e-5)
        # the prefill wrote rows 0..p of its own state in place; rows past p stay NaN
        kc = exe.state("kc")
        np.testing.assert_array_equal(kc[:p], k_all[:p])
        assert np.isnan(kc[p:]).all()
        dec.set_state("kc", kc)
        dec.set_state("vc", exe.state("vc"))
    for t in range(p, total):
        step = {
            "q": q_all[None, t : t + 1],
            "k_new": k_all[t : t + 1],
            "v_new": v_all[t : t + 1],
            "pos": np.array([[t]], np.int32),
            "n": np.array([t + 1], np.int32),
        }
        yh = dec_h.run(**step)["y"]
        yr = dec_r.run(**step)["y"]
        np.testing.assert_allclose(yh[0, 0], want[t], atol=1e-5, rtol=1e-5, err_msg=f"t={t}")
        np.testing.assert_allclose(yr[0, 0], want[t], atol=1e-5, rtol=1e-5, err_msg=f"t={t}")
    for dec in (dec_h, dec_r):
        np.testing.assert_array_equal(dec.state("vc")[:total], v_all)
        assert np.isnan(dec.state("vc")[total:]).all()


def test_in_place_scatter_writes_the_state_itself() -> None:
    # each cache write is one cpu_indexing thunk whose data and dst are the
    # state's own offset, and attention reads k / v right there: no copy
    exe = rlx.compile(_kv_graph(1, 64, 4, 1, 16), device="host")
    sched = exe.schedule
    writes = re.findall(r"scatter_nd .* data=(S@\d+) dst=(S@\d+)", sched)
    assert len(writes) == 2, sched
    assert all(a == b for a, b in writes), sched
    attn = re.search(r"attention .* k=(S@\d+) v=(S@\d+)", sched)
    assert attn is not None and [w[0] for w in writes] == list(attn.groups()), sched
    assert set(exe.stats["by_thunk"]) == {"cpu_indexing", "attention"}, sched


# ---------------------------------------------------------------- errors


def test_kv_len_beyond_cache_is_a_kernel_error() -> None:
    g = rlx.Graph("bad_len")
    q, k = g.input("q", [1, 1, 8]), g.input("k", [1, 4, 8])
    n = g.input("n", [1], "i32")
    g.outputs(g.attention(q, k, k, heads=2, kv_heads=2, kv_len=n, name="y"))
    feeds = {"q": np.zeros((1, 1, 8), np.float32), "k": np.zeros((1, 4, 8), np.float32)}
    host, ref = compile_both(g)
    for exe in (host, ref):
        for bad in (5, 0):
            with pytest.raises(rlx.KernelError, match=r"attention.*kv_len " + str(bad)):
                exe.run(n=np.array([bad], np.int32), **feeds)


def test_kv_len_must_be_i32_vector() -> None:
    g = rlx.Graph("bad_len_dtype")
    q, k = g.input("q", [1, 1, 8]), g.input("k", [1, 4, 8])
    n = g.input("n", [1], "i64")
    with pytest.raises(rlx.ShapeError, match="kv_len must be i32"):
        g.attention(q, k, k, heads=2, kv_len=n)


def test_state_with_two_consumers_is_rejected() -> None:
    g = rlx.Graph("two_readers")
    kc = g.state("kc", [8, 4])
    upd, pos = g.input("u", [1, 4]), g.input("pos", [1, 1], "i32")
    w = g.scatter_nd(kc, pos, upd, name="write")
    also = g.add(kc, kc, name="reader")
    g.outputs(w, also)
    for device in ("host", "reference"):
        with pytest.raises(
            rlx.GraphError,
            match=r"node 3 \(scatter_nd\): 'write' writes "
            r"State 'kc' in place.*node 4 'reader'",
        ):
            rlx.compile(g, device=device)


def test_scatter_row_out_of_range_names_the_index() -> None:
    exe_h, exe_r = compile_both(_kv_graph(1, 8, 2, 1, 4))
    step = {
        "q": np.zeros((1, 1, 8), np.float32),
        "k_new": np.ones((1, 4), np.float32),
        "v_new": np.ones((1, 4), np.float32),
        "pos": np.array([[8]], np.int32),
        "n": np.array([1], np.int32),
    }
    with pytest.raises(rlx.KernelError, match=r"cpu_indexing.*scatter_nd.*index 8"):
        exe_h.run(**step)
    assert (exe_h.state("kc") == 0).all(), "a rejected write must leave the cache alone"
    with pytest.raises(rlx.RlxError, match="scatter_nd"):
        exe_r.run(**step)
