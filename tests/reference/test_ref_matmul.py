"""Matmul references vs explicit triple loops / einsum."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol


def _loop_mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] = math.fsum(float(a[i, p]) * float(b[p, j]) for p in range(k))
    return out


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (3, 13, 7), (5, 1, 3)])
def test_sgemm(m: int, k: int, n: int, dt: str) -> None:
    r = rng(20)
    A = r.normal(size=(m, k)).astype(npdt(dt))
    B = r.normal(size=(k, n)).astype(npdt(dt))
    a = Arena()
    ao, bo, co = a.put(A), a.weight(B), a.out((m, n), npdt(dt))
    a.run(
        {
            "name": "sgemm",
            "a": ao,
            "b": bo,
            "c": co,
            "m": m,
            "k": k,
            "n": n,
            "dt": dt,
            "b_f16": False,
        }
    )
    np.testing.assert_allclose(a.get(co).astype(float), _loop_mm(A, B), **tol(dt))


def test_sgemm_b_f16() -> None:
    m, k, n = 3, 5, 7
    r = rng(21)
    A = r.normal(size=(m, k)).astype(np.float32)
    B = r.normal(size=(k, n)).astype(np.float16)
    a = Arena()
    ao, bo, co = a.put(A), a.weight(B), a.out((m, n))
    a.run(
        {
            "name": "sgemm",
            "a": ao,
            "b": bo,
            "c": co,
            "m": m,
            "k": k,
            "n": n,
            "dt": "f32",
            "b_f16": True,
        }
    )
    np.testing.assert_allclose(a.get(co), _loop_mm(A, B), **tol("f32"))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("a_bc,b_bc", [(False, False), (True, False), (False, True)])
def test_batched_sgemm(a_bc: bool, b_bc: bool, dt: str) -> None:
    bt, m, k, n = 3, 5, 7, 2
    r = rng(22)
    A = r.normal(size=(1 if a_bc else bt, m, k)).astype(npdt(dt))
    B = r.normal(size=(1 if b_bc else bt, k, n)).astype(npdt(dt))
    a = Arena()
    ao, bo, co = a.put(A), a.put(B), a.out((bt, m, n), npdt(dt))
    a.run(
        {
            "name": "batched_sgemm",
            "a": ao,
            "b": bo,
            "c": co,
            "batch": bt,
            "m": m,
            "k": k,
            "n": n,
            "dt": dt,
            "a_bcast": a_bc,
            "b_bcast": b_bc,
        }
    )
    want = np.einsum(
        "bmk,bkn->bmn",
        np.broadcast_to(A, (bt, m, k)).astype(float),
        np.broadcast_to(B, (bt, k, n)).astype(float),
    )
    np.testing.assert_allclose(a.get(co).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_fused_mm_bias_act(act: str | None, dt: str) -> None:
    m, k, n = 3, 5, 7
    r = rng(23)
    A = r.normal(size=(m, k)).astype(npdt(dt))
    W = r.normal(size=(k, n)).astype(npdt(dt))
    bias = r.normal(size=n).astype(npdt(dt))
    a = Arena()
    ao, wo, bo, co = a.put(A), a.weight(W), a.weight(bias), a.out((m, n), npdt(dt))
    a.run(
        {
            "name": "fused_mm_bias_act",
            "a": ao,
            "w": wo,
            "bias": bo,
            "c": co,
            "m": m,
            "k": k,
            "n": n,
            "act": act,
            "dt": dt,
        }
    )
    z = _loop_mm(A, W) + bias.astype(float)
    fn = {
        None: lambda v: v,
        "relu": lambda v: max(v, 0.0),
        "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
        "silu": lambda v: v / (1 + math.exp(-v)),
    }[act]
    want = np.vectorize(fn)(z)
    np.testing.assert_allclose(a.get(co).astype(float), want, **tol(dt))


def test_grouped_matmul() -> None:
    m, kd, n, ne = 7, 5, 3, 4
    r = rng(24)
    X = r.normal(size=(m, kd)).astype(np.float32)
    W = r.normal(size=(ne, kd, n)).astype(np.float32)
    e = np.array([3, 0, 0, 2, 3, 1, 2], np.int32)
    a = Arena()
    xo, wo, eo, do = a.put(X), a.weight(W), a.put(e), a.out((m, n))
    a.run(
        {
            "name": "grouped_matmul",
            "input": xo,
            "weight": wo,
            "expert_idx": eo,
            "dst": do,
            "m": m,
            "k_dim": kd,
            "n": n,
            "num_experts": ne,
        }
    )
    want = np.vstack([_loop_mm(X[i : i + 1], W[e[i]]) for i in range(m)])
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


def test_grouped_matmul_rejects_bad_expert() -> None:
    a = Arena()
    xo = a.put(np.ones((1, 2), np.float32))
    wo = a.put(np.ones((2, 2, 2), np.float32))
    eo = a.put(np.array([2], np.int32))
    do = a.out((1, 2))
    with pytest.raises(IndexError):
        a.run(
            {
                "name": "grouped_matmul",
                "input": xo,
                "weight": wo,
                "expert_idx": eo,
                "dst": do,
                "m": 1,
                "k_dim": 2,
                "n": 2,
                "num_experts": 2,
            }
        )
