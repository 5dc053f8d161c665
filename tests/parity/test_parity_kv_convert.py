"""ScatterND writing float updates into data of another float type (the f16
KV cache fed f32 rows without a cast node): host, reference and metal-sim
against numpy — ``data[idx] = updates.astype(float16)`` (round to nearest
even), ``astype(float32)`` for f16 updates into an f32 cache, and
``ml_dtypes.bfloat16`` (an implementation we did not write) for bf16 — with
odd row lengths, negative and duplicate slots (the later wins), values that
round up / down / to even, overflow to ±inf, subnormals, signed zero and NaN;
in place (a State) and out of place (an input).

The converting write must store exactly what ``cast`` then ``scatter_nd``
stores (the decoders relied on the pair before): compared bit for bit,
NaN payloads included, with one thunk fewer. Mismatched non-float dtypes
stay a DTypeError naming the op and both dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

ml_dtypes = pytest.importorskip("ml_dtypes")

NP = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
ROWS, KVD = 7, 13
SLOTS = np.array([[5], [0], [-1], [5]], np.int32)  # -1 = row 6; row 5 twice: the later wins


def _probes(n: int, seed: int) -> np.ndarray:
    """``n`` f32 values: rounding edges of f16 and bf16 first, then random
    ones over a wide range."""
    ulp = 2.0**-10
    edge = [
        1 + ulp / 2,  # tie → 1 (even)
        1 + 1.5 * ulp,  # tie → 1 + 2 ulp (even)
        1 + 0.51 * ulp,  # above a tie → up
        65504.0,  # largest finite half
        65519.99,  # → 65504
        65520.0,  # tie at the edge → inf
        -7e4,  # → -inf
        6e-8,  # half subnormal
        2e-8,  # → 0 in half
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1 + 2.0**-8,  # bf16 tie → 1 (even)
        3e38,  # finite in bf16
        -1e-5,
    ]
    rng = np.random.default_rng(seed)
    rest = rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))
    out = np.concatenate([np.array(edge), rest])[:n]
    return out.astype(np.float32)


def _graph(data_dt: str, upd_dt: str, in_place: bool, explicit_cast: bool = False) -> rlx.Graph:
    g = rlx.Graph("kv_write")
    leaf = g.state if in_place else g.input
    data = leaf("cache", [ROWS, KVD], data_dt)
    slots = g.input("slots", [len(SLOTS), 1], "i32")
    upd = g.input("upd", [len(SLOTS), KVD], upd_dt)
    if explicit_cast:
        upd = g.cast(upd, data_dt)
    full = g.scatter_nd(data, slots, upd, name="write")
    # a state cannot itself be an output: read it through an exact widening
    # (f32: a product with 1, which keeps -0, ±inf and NaN)
    if data_dt == "f32":
        g.outputs(g.mul(full, g.constant(1.0), name="y"))
    else:
        g.outputs(g.cast(full, "f32", name="y"))
    return g


def _io(a: np.ndarray) -> np.ndarray:
    """What an executable takes: bf16 as its bit pattern (uint16)."""
    return a.view(np.uint16) if a.dtype == NP["bf16"] else a


def _want(cache: np.ndarray, upd: np.ndarray, data_dt: str) -> np.ndarray:
    want = cache.copy()
    for r, i in enumerate(SLOTS[:, 0]):
        want[i] = upd[r].astype(NP[data_dt])
    return want


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, NaN payloads aside (NaN where numpy has NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    u = np.uint16 if want.itemsize == 2 else np.uint32
    np.testing.assert_array_equal(got.view(u)[~nan], want.view(u)[~nan])


PAIRS = [("f16", "f32"), ("f32", "f16"), ("bf16", "f32"), ("f32", "bf16"), ("f16", "bf16")]
# the Metal kernels convert f32 ↔ f16; bf16 pairs stay on the host there
METAL_PAIRS = [("f16", "f32"), ("f32", "f16")]


def _cases() -> list:
    out = []
    for data_dt, upd_dt in PAIRS:
        for device in ("host", "reference", "metal-sim"):
            if device == "metal-sim" and (data_dt, upd_dt) not in METAL_PAIRS:
                continue
            for in_place in (True, False):
                where = "state" if in_place else "input"
                case = f"{upd_dt}->{data_dt}-{device}-{where}"
                out.append(pytest.param(data_dt, upd_dt, device, in_place, id=case))
    return out


@pytest.mark.parametrize("data_dt,upd_dt,device,in_place", _cases())
def test_converting_scatter_matches_numpy(
    data_dt: str, upd_dt: str, device: str, in_place: bool
) -> None:
    with np.errstate(over="ignore"):
        upd = _probes(len(SLOTS) * KVD, seed=3).reshape(len(SLOTS), KVD).astype(NP[upd_dt])
    cache = (np.arange(ROWS * KVD, dtype=np.float32).reshape(ROWS, KVD) / 8 - 3).astype(NP[data_dt])
    exe = rlx.compile(_graph(data_dt, upd_dt, in_place), device=device)
    feeds = {"slots": SLOTS, "upd": _io(upd)}
    if in_place:
        exe.set_state("cache", _io(cache))
    else:
        feeds["cache"] = _io(cache)
    with np.errstate(over="ignore"):
        want = _want(cache, upd, data_dt)
    y = exe.run(**feeds)["y"]
    _same_bits(y.astype(NP[data_dt]), want)
    if in_place:
        _same_bits(np.asarray(exe.state("cache")).view(NP[data_dt]), want)
    if device == "host":  # the native kernel, not the numpy fallback
        assert exe.stats["fallback_by_thunk"].get("cpu_indexing", 0) == 0
    if device == "metal-sim" and in_place:  # (out of place: a host command by design)
        st = exe.stats
        assert st["metal_host"] == 0, st


@pytest.mark.parametrize("data_dt,upd_dt", PAIRS)
def test_converting_write_stores_what_cast_then_scatter_stores(data_dt: str, upd_dt: str) -> None:
    with np.errstate(over="ignore"):
        upd = _probes(len(SLOTS) * KVD, seed=9).reshape(len(SLOTS), KVD).astype(NP[upd_dt])
    upd.reshape(-1)[-3:] = np.array([np.nan, -np.nan, np.inf], np.float32).astype(NP[upd_dt])
    cache = np.zeros((ROWS, KVD), NP[data_dt])
    states = []
    thunks = []
    for explicit in (False, True):
        exe = rlx.compile(_graph(data_dt, upd_dt, True, explicit_cast=explicit), device="host")
        exe.set_state("cache", _io(cache))
        exe.run(slots=SLOTS, upd=_io(upd))
        states.append(np.asarray(exe.state("cache")).view(NP[data_dt]).copy())
        thunks.append(sum(exe.stats["by_thunk"].values()))
    u = np.uint16 if NP[data_dt].itemsize == 2 else np.uint32
    np.testing.assert_array_equal(states[0].view(u), states[1].view(u))  # NaN bits too
    assert thunks[0] == thunks[1] - 1, thunks


@pytest.mark.parametrize(
    "data_dt,upd_dt",
    [("f32", "i32"), ("i32", "f32"), ("i32", "i64"), ("f64", "f32"), ("f16", "u8")],
)
def test_other_mismatches_are_dtype_errors(data_dt: str, upd_dt: str) -> None:
    g = rlx.Graph("bad")
    data = g.state("cache", [4, 3], data_dt)
    slots = g.input("slots", [1, 1], "i32")
    upd = g.input("upd", [1, 3], upd_dt)
    with pytest.raises(rlx.DTypeError, match=rf"scatter_nd.*{upd_dt}\[1, 3\].*{data_dt}\[4, 3\]"):
        g.scatter_nd(data, slots, upd)
