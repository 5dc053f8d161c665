"""Zero-copy weights (``bind_param``) and state buffers shared between
executables (``share_state``), on both devices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rlx

DEVICES = ["host", "reference"]


def _mlp() -> rlx.Graph:
    g = rlx.Graph("mlp")
    x = g.input("x", [2, 3])
    w = g.param("w", [3, 4])
    b = g.param("b", [4])
    g.outputs(g.add(x @ w, b, name="y"))
    return g


def _x() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0


# ------------------------------------------------------------- bind_param
@pytest.mark.parametrize("device", DEVICES)
def test_bind_param_is_zero_copy(device: str) -> None:
    exe = rlx.compile(_mlp(), device=device)
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b = np.arange(4, dtype=np.float32)
    exe.bind_param("w", w)
    exe.bind_param("b", b)
    x = _x()
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w + b, rtol=1e-5, atol=1e-5)
    # Mutating the caller's arrays is seen by the next run: nothing was copied.
    w *= -3.0
    b[:] = 7.0
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w + b, rtol=1e-5, atol=1e-5)
    # the native segment of a bound param is a read-only window on w itself
    seg = np.frombuffer(exe._native.segment_view(1), np.float32)
    assert not seg.flags.writeable
    np.testing.assert_array_equal(seg, w.reshape(-1))
    s = exe.stats
    assert s["weights_bytes_external"] == w.nbytes + b.nbytes
    # only segment 0 (compiler constants) is owned
    assert s["weights_bytes_owned"] == s["weights_bytes"] - w.nbytes - b.nbytes


@pytest.mark.parametrize("device", DEVICES)
def test_bind_param_memmap(device: str, tmp_path: Path) -> None:
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal(4).astype(np.float32)
    path = tmp_path / "weights.bin"
    with open(path, "wb") as f:
        f.write(w.tobytes())
        f.write(b.tobytes())
    mm = np.memmap(path, dtype=np.float32, mode="r")  # read-only file mapping
    exe = rlx.compile(_mlp(), device=device)
    exe.bind_param("w", mm[:12].reshape(3, 4))
    exe.bind_param("b", mm[12:])
    del mm  # the executable keeps the mapping alive
    x = _x()
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w + b, rtol=1e-5, atol=1e-5)


def test_bind_param_accepts_buffer_objects() -> None:
    exe = rlx.compile(_mlp())
    w = np.eye(3, 4, dtype=np.float32)
    exe.bind_param("w", memoryview(w))  # buffer protocol, not an ndarray
    buf = bytearray(np.full(4, 0.5, np.float32).tobytes())
    exe.bind_param("b", np.frombuffer(buf, np.float32))
    x = _x()
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w + 0.5, rtol=1e-6)
    buf[:4] = np.float32(2.0).tobytes()  # b[0] = 2, seen without rebinding
    np.testing.assert_allclose(exe.run(x=x)["y"][:, 0], x[:, 0] + 2.0, rtol=1e-6)


def test_bind_param_errors_name_the_param() -> None:
    exe = rlx.compile(_mlp())
    with pytest.raises(rlx.DTypeError, match=r"'w'.*f32.*float64"):
        exe.bind_param("w", np.zeros((3, 4)))
    with pytest.raises(rlx.ShapeError, match=r"'w'.*\[3, 4\].*\[4, 3\]"):
        exe.bind_param("w", np.zeros((4, 3), np.float32))
    with pytest.raises(rlx.WeightFormatError, match=r"'w'.*C-contiguous"):
        exe.bind_param("w", np.zeros((4, 3), np.float32).T)
    raw = np.zeros(4 * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32)  # 4 floats starting at an odd address
    assert misaligned.__array_interface__["data"][0] % 4 != 0
    with pytest.raises(rlx.WeightFormatError, match=r"'b'.*not aligned to its 4-byte"):
        exe.bind_param("b", misaligned)
    with pytest.raises(KeyError, match="no param named 'nope'"):
        exe.bind_param("nope", np.zeros(4, np.float32))
    # nothing was bound: running still reports the params as missing
    with pytest.raises(rlx.RlxError, match="params not set: b, w"):
        exe.run(x=_x())


def test_bind_packed_u8_param() -> None:
    # A packed-weight-like u8 param read through a cast: bytes bound as-is.
    g = rlx.Graph("u8")
    q = g.param("q", [2, 8], "u8")
    g.outputs(g.cast(q, "f32", name="f"))
    exe = rlx.compile(g)
    data = np.arange(16, dtype=np.uint8).reshape(2, 8)
    with pytest.raises(rlx.DTypeError, match="'q'"):
        exe.bind_param("q", data.astype(np.int8))
    exe.bind_param("q", data)
    np.testing.assert_array_equal(exe.run()["f"], data.astype(np.float32))
    data[1, 0] = 200
    assert exe.run()["f"][1, 0] == 200.0


@pytest.mark.parametrize("device", DEVICES)
def test_mixing_bind_and_set(device: str) -> None:
    exe = rlx.compile(_mlp(), device=device)
    w = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    exe.bind_param("w", w)
    exe.set_param("b", [1, 2, 3, 4])  # converted copy
    x = _x()
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w + [1, 2, 3, 4], rtol=1e-5, atol=1e-5)
    # set_param after bind_param copies: later mutation of w is no longer seen
    exe.set_param("w", w)
    w_before = w.copy()
    w[:] = 0.0
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w_before + [1, 2, 3, 4], rtol=1e-5, atol=1e-5)
    s = exe.stats
    assert s["weights_bytes_external"] == 0
    assert s["weights_bytes_owned"] == s["weights_bytes"]
    # and binding again switches back to zero-copy
    b = np.zeros(4, np.float32)
    exe.bind_param("b", b)
    np.testing.assert_allclose(exe.run(x=x)["y"], x @ w_before, rtol=1e-5, atol=1e-5)
    assert exe.stats["weights_bytes_external"] == 16


# ------------------------------------------------------------- share_state
def _reader(name: str, scale: float) -> rlx.Graph:
    """out = kv · scale + x, reading the state 'kv'."""
    g = rlx.Graph(name)
    kv = g.state("kv", [2, 4])
    x = g.input("x", [2, 4])
    g.outputs(g.add(g.mul(kv, g.constant(scale)), x, name="out"))
    return g


@pytest.mark.parametrize("device", DEVICES)
def test_share_state_one_buffer(device: str) -> None:
    prefill = rlx.compile(_reader("prefill", 2.0), device=device)
    decode = rlx.compile(_reader("decode", -1.0), device=device)
    assert not decode.shares_state_with(prefill)
    decode.share_state(prefill)
    assert decode.shares_state_with(prefill) and prefill.shares_state_with(decode)
    kv = np.arange(8, dtype=np.float32).reshape(2, 4)
    x = np.ones((2, 4), np.float32)
    prefill.set_state("kv", kv)  # written through one executable...
    np.testing.assert_array_equal(decode.state("kv"), kv)  # ...seen by the other
    np.testing.assert_allclose(decode.run(x=x)["out"], -kv + 1.0)
    np.testing.assert_allclose(prefill.run(x=x)["out"], 2.0 * kv + 1.0)
    decode.set_state("kv", kv + 10.0)
    np.testing.assert_allclose(prefill.run(x=x)["out"], 2.0 * (kv + 10.0) + 1.0)
    prefill.reset_state()
    np.testing.assert_array_equal(decode.state("kv"), np.zeros((2, 4), np.float32))
    np.testing.assert_allclose(decode.run(x=x)["out"], x)
    assert prefill.stats["state_bytes"] == 64  # 32 bytes, 64-byte aligned
    assert prefill.stats["arena_bytes"] < prefill.stats["naive_bytes"] + 64 * 8


def test_state_not_in_arena() -> None:
    g = rlx.Graph("big_state")
    kv = g.state("kv", [1024, 64])  # 256 KiB of state
    x = g.input("x", [4])
    g.outputs(g.add(g.narrow(g.reshape(kv, [65536]), 0, 0, 4), x, name="y"))
    exe = rlx.compile(g)
    s = exe.stats
    assert s["state_bytes"] == 1024 * 64 * 4
    assert s["arena_bytes"] < 4096  # the arena holds x and y only
    kv_val = np.random.default_rng(4).standard_normal((1024, 64)).astype(np.float32)
    exe.set_state("kv", kv_val)
    np.testing.assert_allclose(exe.run(x=np.ones(4, np.float32))["y"], kv_val[0, :4] + 1.0)
    assert "S@0" in exe.schedule


def test_share_state_refuses_mismatched_tables() -> None:
    a = rlx.compile(_reader("a", 1.0))
    g = rlx.Graph("b")
    kv = g.state("kv", [2, 8])  # same name, other shape
    g.outputs(g.mul(kv, g.constant(1.0), name="out"))
    b = rlx.compile(g)
    want = r"state tables differ.*'kv' f32\[2, 8\].*'kv' f32\[2, 4\]"
    with pytest.raises(rlx.RlxError, match=want):
        b.share_state(a)
    g2 = rlx.Graph("c")
    other = g2.state("cache", [2, 4])  # same shape, other name
    g2.outputs(g2.mul(other, g2.constant(1.0), name="out"))
    c = rlx.compile(g2)
    with pytest.raises(rlx.RlxError, match="state tables differ"):
        c.share_state(a)
    assert not c.shares_state_with(a)
    with pytest.raises(TypeError, match="rlx.Executable"):
        a.share_state("not an executable")  # type: ignore[arg-type]
    a.share_state(a)  # sharing with itself is a no-op


def test_reset_state_zero_fills() -> None:
    exe = rlx.compile(_reader("r", 1.0))
    exe.set_state("kv", np.full((2, 4), 3.0, np.float32))
    np.testing.assert_allclose(exe.run(x=np.zeros((2, 4), np.float32))["out"], 3.0)
    exe.reset_state()
    np.testing.assert_array_equal(exe.state("kv"), np.zeros((2, 4), np.float32))
    with pytest.raises(KeyError, match="no state named 'nope'"):
        exe.state("nope")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_bind_param_adds_no_resident_copy(tmp_path: Path) -> None:
    rows, cols = 16384, 1024  # 64 MiB of f32
    path = tmp_path / "big.bin"
    with open(path, "wb") as f:
        block = np.full((1024, cols), 0.5, np.float32).tobytes()
        for _ in range(rows // 1024):
            f.write(block)
    g = rlx.Graph("big")
    w = g.param("w", [rows, cols])
    g.outputs(g.narrow(w, 0, 3, 1, name="row"))  # a view: the run reads nothing big
    exe = rlx.compile(g)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, cols))
    before = _rss_mib()
    exe.bind_param("w", mm)
    out = exe.run()["row"]
    grown = _rss_mib() - before
    np.testing.assert_array_equal(out, np.full((1, cols), 0.5, np.float32))
    assert grown < 16, f"RSS grew {grown:.1f} MiB binding a 64 MiB memmap"
    # the copying path, for contrast, makes the whole matrix resident
    exe.set_param("w", mm)
    assert _rss_mib() - before > 60


def test_run_reentering_a_sharing_executable_fails_cleanly() -> None:
    # A custom op of one executable runs another that shares its state buffer
    # (held for the first run): the inner run raises instead of deadlocking.
    inner = rlx.compile(_reader("inner", 1.0))
    seen: list[BaseException] = []

    def host(inputs: list[np.ndarray], out: np.ndarray) -> None:
        try:
            inner.run(x=np.zeros((2, 4), np.float32))
        except rlx.RlxError as e:
            seen.append(e)
        out[...] = inputs[0]

    rlx.register_op("wts_reenter", lambda a, **_: a, host)
    g = rlx.Graph("outer")
    kv = g.state("kv", [2, 4])
    x = g.input("x", [2, 4])
    g.outputs(g.custom_op("wts_reenter", g.add(kv, x), name="out"))
    outer = rlx.compile(g)
    inner.share_state(outer)
    outer.set_state("kv", np.ones((2, 4), np.float32))
    np.testing.assert_allclose(outer.run(x=np.ones((2, 4), np.float32))["out"], 2.0)
    assert len(seen) == 1 and "state buffer is in use" in str(seen[0])
    # once the outer run is over, the inner one runs on the shared state
    np.testing.assert_allclose(inner.run(x=np.zeros((2, 4), np.float32))["out"], 1.0)


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_state_buffer_untouched_until_written() -> None:
    """A large state buffer (a KV cache sized for many slots) costs resident
    memory only for what is written: compiling a graph with a 128 MiB state
    grows the resident anonymous memory by far less than that, and writing
    one row of it by about that row. (Before, the 64-byte-aligned zeroed
    allocation was memalign + memset: the whole buffer became resident.)"""
    rows, width = 8192, 4096  # 8192 × 4096 f32 = 128 MiB
    g = rlx.Graph("big_state")
    kv = g.state("kv", [rows, width])
    x = g.input("x", [1, width])
    g.outputs(g.add(g.narrow(kv, 0, 0, 1), x, name="out"))
    before = _rss_anon_kib()
    exe = rlx.compile(g)
    grown = _rss_anon_kib() - before
    assert exe.stats["state_bytes"] >= rows * width * 4
    assert grown < 32 * 1024, f"compile made {grown} KiB resident"
    out = exe.run(x=np.ones((1, width), np.float32))["out"]
    np.testing.assert_array_equal(out, np.ones((1, width), np.float32))  # zeroed state
