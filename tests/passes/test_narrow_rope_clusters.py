"""fuse_narrow_rope and fuse_narrow_clusters on compiled graphs: a fused QKV
split along the last axis, Q and K rotated. Outputs with the passes on equal
the outputs with them off (RLX_DISABLE_PASS) and numpy's; the passes fire
where the pattern holds and refuse where a narrowed value stays live."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

ROPE = "fuse_narrow_rope"
SPLIT = "fuse_narrow_clusters"
HD = 8


def _compile(g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "") -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g)


def _qkv_graph(
    s: int, heads: int, kv_heads: int, q_out: bool = False, keep: bool = True
) -> rlx.Graph:
    """x [1, s, (heads + 2·kv_heads)·HD] → rope(q), rope(k), v (all outputs).

    ``keep`` reads the QKV again at the end, so the planner cannot put a
    rope's output on the QKV rows (a fused rope reads them while writing)."""
    qd, kd = heads * HD, kv_heads * HD
    g = rlx.Graph("qkv")
    x = g.input("qkv", [1, s, qd + 2 * kd])
    cos = g.input("cos", [s, HD // 2])
    sin = g.input("sin", [s, HD // 2])
    q = g.narrow(x, -1, 0, qd, name="q")
    k = g.narrow(x, -1, qd, kd, name="k")
    v = g.narrow(x, -1, qd + kd, kd, name="v")
    qr = g.rope(q, cos, sin, head_dim=HD, name="q_rot")
    kr = g.rope(k, cos, sin, head_dim=HD, name="k_rot")
    outs = [qr, kr, g.mul(v, 2.0, name="v2"), *([q] if q_out else [])]
    g.outputs(*outs, *([g.mul(x, 1.0, name="x1")] if keep else []))
    return g


def _rope_ref(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """NeoX rotate-half RoPE over heads of HD on x [1, s, n·HD]."""
    s = x.shape[1]
    h = x.reshape(s, -1, HD).astype(np.float64)
    a, b = h[..., : HD // 2], h[..., HD // 2 :]
    c, sn = cos[:, None, :], sin[:, None, :]
    return np.concatenate([a * c - b * sn, b * c + a * sn], -1).reshape(x.shape)


def _feeds(s: int, width: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ang = rng.uniform(-3, 3, (s, HD // 2))
    return {
        "qkv": rng.standard_normal((1, s, width)).astype(np.float32),
        "cos": np.cos(ang).astype(np.float32),
        "sin": np.sin(ang).astype(np.float32),
    }


@pytest.mark.parametrize("s,heads,kv_heads", [(3, 2, 1), (7, 4, 2)])
def test_rope_reads_the_parent(
    monkeypatch: pytest.MonkeyPatch, s: int, heads: int, kv_heads: int
) -> None:
    qd, kd = heads * HD, kv_heads * HD
    feeds = _feeds(s, qd + 2 * kd, s * 10 + heads)
    on = _compile(_qkv_graph(s, heads, kv_heads), monkeypatch)
    off = _compile(_qkv_graph(s, heads, kv_heads), monkeypatch, f"{ROPE},{SPLIT}")
    only_split = _compile(_qkv_graph(s, heads, kv_heads), monkeypatch, ROPE)
    assert on.stats["pass_matches"][ROPE] == 2
    assert on.stats["pass_matches"][SPLIT] == 0  # only v's narrow is left
    assert on.stats["dispatches"] == off.stats["dispatches"] - 2
    assert "stride=" in on.schedule and "narrow" in on.schedule
    assert only_split.stats["pass_matches"][SPLIT] == 1
    assert "split_lastax" in only_split.schedule
    assert only_split.stats["dispatches"] == off.stats["dispatches"] - 2
    x = feeds["qkv"]
    ref = {
        "q_rot": _rope_ref(x[..., :qd], feeds["cos"], feeds["sin"]),
        "k_rot": _rope_ref(x[..., qd : qd + kd], feeds["cos"], feeds["sin"]),
        "v2": 2.0 * x[..., qd + kd :],
    }
    y_off = off.run(**feeds)
    for name, r in ref.items():
        np.testing.assert_allclose(y_off[name], r, rtol=1e-5, atol=1e-5)
    for exe in (on, only_split):
        y = exe.run(**feeds)
        for name in ref:
            np.testing.assert_array_equal(y[name], y_off[name])


def test_refuses_narrow_that_is_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_qkv_graph(3, 2, 1, q_out=True), monkeypatch, SPLIT)
    assert exe.stats["pass_matches"][ROPE] == 1  # k only: q stays an output
    feeds = _feeds(3, 32, 5)
    y = exe.run(**feeds)
    np.testing.assert_array_equal(y["q"], feeds["qkv"][..., :16])


def test_refuses_output_on_the_parent_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # QKV dies at the narrows, so the planner puts q_rot on its rows
    exe = _compile(_qkv_graph(3, 2, 1, keep=False), monkeypatch)
    assert exe.stats["pass_matches"][ROPE] == 0
    assert exe.stats["pass_matches"][SPLIT] == 1


def test_decode_narrows_are_views(monkeypatch: pytest.MonkeyPatch) -> None:
    # one row: last-axis narrows of [1, 1, n] alias their parent, no thunk
    exe = _compile(_qkv_graph(1, 2, 1), monkeypatch)
    assert "narrow" not in exe.schedule
    assert exe.stats["pass_matches"][ROPE] == 0


def _split_graph(rows: int, widths: list[int], starts: list[int] | None = None) -> rlx.Graph:
    g = rlx.Graph("split")
    total = sum(widths) if starts is None else max(s + w for s, w in zip(starts, widths))
    x = g.input("x", [rows, total])
    at = starts or list(np.cumsum([0, *widths[:-1]]))
    g.outputs(
        *(g.narrow(x, -1, int(s), w, name=f"p{i}") for i, (s, w) in enumerate(zip(at, widths)))
    )
    return g


@pytest.mark.parametrize("rows,widths", [(2, [4, 6, 2]), (5, [16, 16]), (3, [1, 7, 9, 3])])
def test_split_matches_numpy(monkeypatch: pytest.MonkeyPatch, rows: int, widths: list[int]) -> None:
    x = np.random.default_rng(rows).standard_normal((rows, sum(widths))).astype(np.float32)
    on = _compile(_split_graph(rows, widths), monkeypatch)
    off = _compile(_split_graph(rows, widths), monkeypatch, SPLIT)
    assert on.stats["pass_matches"][SPLIT] == 1
    assert on.stats["dispatches"] == off.stats["dispatches"] - (len(widths) - 1)
    y_on, y_off = on.run(x=x), off.run(x=x)
    at = np.cumsum([0, *widths])
    for i in range(len(widths)):
        np.testing.assert_array_equal(y_on[f"p{i}"], x[:, at[i] : at[i + 1]])
        np.testing.assert_array_equal(y_off[f"p{i}"], y_on[f"p{i}"])


@pytest.mark.parametrize("starts,widths", [([0, 6], [4, 6]), ([0, 3], [5, 7])])
def test_split_refuses_gaps_and_overlaps(
    monkeypatch: pytest.MonkeyPatch, starts: list[int], widths: list[int]
) -> None:
    exe = _compile(_split_graph(2, widths, starts), monkeypatch)
    assert exe.stats["pass_matches"][SPLIT] == 0
    assert "split_lastax" not in exe.schedule
