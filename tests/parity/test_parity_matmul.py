"""Matmul family, host vs reference (and numpy): dense 2-D, batched,
broadcast batches, rank-1 operands, f16, mixed f32 × f16, bias + every
activation, grouped (MoE)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest
import rlx
from _harness2 import check, rand
from rlx.reference._act import REGION_ACTIVATIONS

ACTS: list[Optional[str]] = [None, *REGION_ACTIVATIONS]


def _mm(
    a_shape: list[int],
    b_shape: list[int],
    dt: str = "f32",
    b_dt: Optional[str] = None,
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    g = rlx.Graph("mm")
    a = g.input("a", a_shape, dt)
    b = g.input("b", b_shape, b_dt or dt)
    g.outputs(g.matmul(a, b, name="y"))
    av = rand(rng, a_shape, np.dtype(np.float16 if dt == "f16" else np.float32))
    bv = rand(rng, b_shape, np.dtype(np.float16 if (b_dt or dt) == "f16" else np.float32))
    want = np.matmul(av.astype(np.float64), bv.astype(np.float64))
    sgemm = "sgemm" if len(b_shape) <= 2 or math.prod(b_shape[:-2]) == 1 else "batched_sgemm"
    out = check(g, {"a": av, "b": bv}, native=[sgemm], expect=want)
    assert out["y"].shape == want.shape


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 1, 5), (2, 129, 3)])
def test_matmul_2d(dt: str, mkn: tuple[int, int, int]) -> None:
    m, k, n = mkn
    _mm([m, k], [k, n], dt)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ([3, 5, 7], [3, 7, 4]),  # same batch
        ([2, 3, 5, 7], [2, 3, 7, 4]),  # two batch dims
        ([1, 5, 7], [3, 7, 4]),  # lhs batch 1
        ([3, 5, 7], [1, 7, 4]),  # rhs batch 1
        ([5, 7], [3, 7, 4]),  # 2-D lhs, batched rhs
        ([2, 3, 5, 7], [7, 4]),  # batched lhs, 2-D rhs
        ([2, 1, 5, 7], [1, 3, 7, 4]),  # partial broadcasts on both sides
        ([2, 1, 5, 7], [3, 7, 4]),  # rank-different partial broadcast
        ([3, 5, 7], [2, 1, 7, 4]),
        ([1, 3, 5, 7], [2, 3, 7, 4]),
        ([2, 3, 5, 7], [2, 1, 7, 4]),
    ],
)
def test_matmul_batched(dt: str, a_shape: list[int], b_shape: list[int]) -> None:
    _mm(a_shape, b_shape, dt)


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [([7], [7, 4]), ([5, 7], [7]), ([7], [7]), ([7], [3, 7, 4]), ([2, 5, 7], [7])],
)
def test_matmul_rank1(a_shape: list[int], b_shape: list[int]) -> None:
    _mm(a_shape, b_shape)


@pytest.mark.parametrize(
    "shapes", [([3, 5], [5, 7]), ([2, 3, 5], [5, 7]), ([6, 9], [9, 130]), ([2, 3, 5], [2, 5, 7])]
)
def test_matmul_f32_lhs_f16_rhs(shapes: tuple[list[int], list[int]]) -> None:
    _mm(shapes[0], shapes[1], "f32", "f16")


def test_matmul_f16_long_reduction() -> None:
    # k = 513 f16 products accumulate in f32 on host and f64 in the reference;
    # the result is rounded to f16 once, so 1e-2 still holds.
    _mm([4, 513], [513, 6], "f16", seed=3)


def test_matmul_f32_long_reduction() -> None:
    # k = 2049: an f32 accumulation of n unit-normal products has an error
    # growing like sqrt(n)·eps·|terms| ≈ 45·6e-8·O(1) relative to a result of
    # size ~sqrt(n); below 1e-5·(1 + |y|) still, so the f32 bound is kept.
    _mm([3, 2049], [2049, 5], seed=4)


@pytest.mark.parametrize("act", ACTS)
def test_matmul_bias_act(act: Optional[str]) -> None:
    rng = np.random.default_rng(1)
    m, k, n = 7, 13, 11
    g = rlx.Graph("mba")
    a = g.input("a", [1, m, k])
    w = g.param("w", [k, n])
    bias = g.param("bias", [n])
    g.outputs(g.matmul_bias_act(a, w, bias, act=act, name="y"))
    av, wv, bv = rand(rng, [1, m, k]), rand(rng, [k, n], scale=0.3), rand(rng, [n])
    if act in ("log", "sqrt", "rsqrt"):
        bv = np.abs(bv) + 4.0  # keep the domain positive
    z = av.astype(np.float64) @ wv.astype(np.float64) + bv.astype(np.float64)
    want = _act(act, z)
    check(g, {"a": av}, {"w": wv, "bias": bv}, native=["fused_mm_bias_act"], expect=want)


def _act(act: Optional[str], z: np.ndarray) -> np.ndarray:
    from math import erf

    table = {
        None: lambda x: x,
        "gelu": lambda x: x * 0.5 * (1 + np.vectorize(erf)(x / math.sqrt(2))),
        "gelu_approx": lambda x: (
            0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        ),
        "silu": lambda x: x / (1 + np.exp(-x)),
        "relu": lambda x: np.maximum(x, 0),
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh,
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "rsqrt": lambda x: 1 / np.sqrt(x),
        "neg": np.negative,
        "abs": np.abs,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "atan": np.arctan,
        "round": np.rint,
    }
    return table[act](z)


def test_matmul_bias_act_f16() -> None:
    rng = np.random.default_rng(2)
    g = rlx.Graph("mba16")
    a = g.input("a", [5, 9], "f16")
    w = g.param("w", [9, 6], "f16")
    bias = g.param("bias", [6], "f16")
    g.outputs(g.matmul_bias_act(a, w, bias, act="gelu", name="y"))
    av, wv, bv = (rand(rng, s, np.float16) for s in ([5, 9], [9, 6], [6]))
    z = av.astype(np.float64) @ wv.astype(np.float64) + bv
    check(g, {"a": av}, {"w": wv, "bias": bv}, native=["fused_mm_bias_act"], expect=_act("gelu", z))


@pytest.mark.parametrize("m,k,n,e", [(1, 3, 2, 1), (9, 7, 5, 3), (33, 16, 10, 4)])
def test_grouped_matmul(m: int, k: int, n: int, e: int) -> None:
    rng = np.random.default_rng(m)
    g = rlx.Graph("moe")
    x = g.input("x", [m, k])
    w = g.param("w", [e, k, n])
    idx = g.input("idx", [m], "i32")
    g.outputs(g.grouped_matmul(x, w, idx, name="y"))
    xv, wv = rand(rng, [m, k]), rand(rng, [e, k, n])
    iv = rng.integers(0, e, m).astype(np.int32)
    want = np.einsum("mk,mkn->mn", xv.astype(np.float64), wv.astype(np.float64)[iv])
    check(g, {"x": xv, "idx": iv}, {"w": wv}, native=["grouped_matmul"], expect=want)


def test_grouped_matmul_i64_indices() -> None:
    rng = np.random.default_rng(5)
    g = rlx.Graph("moe64")
    x = g.input("x", [6, 4])
    w = g.param("w", [3, 4, 5])
    idx = g.input("idx", [6], "i64")
    g.outputs(g.grouped_matmul(x, w, idx, name="y"))
    xv, wv = rand(rng, [6, 4]), rand(rng, [3, 4, 5])
    iv = np.array([2, 0, 1, 1, 2, 0], np.int64)
    want = np.einsum("mk,mkn->mn", xv.astype(np.float64), wv.astype(np.float64)[iv])
    check(g, {"x": xv, "idx": iv}, {"w": wv}, native=["grouped_matmul"], expect=want)
