"""Dense matmul thunks: Sgemm, BatchedSgemm, FusedMmBiasAct and the MoE
GroupedMatMul. Row-major operands; products accumulate in float64 and are
rounded once to the output dtype."""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import activate, store
from ._common import F32, I32, fdt


def _ieee() -> np.errstate:
    """NaN / inf operands are legal and follow IEEE; numpy's warnings about
    them are noise here."""
    return np.errstate(invalid="ignore", over="ignore")


@reference("sgemm")
def sgemm(t: dict, mem: Memory) -> None:
    """``C[m, n] = A[m, k] @ B[k, n]`` in ``dt``; with ``b_f16`` (and
    ``dt="f32"``) B is stored as float16 and promoted."""
    dt, m, k, n = fdt(t), t["m"], t["k"], t["n"]
    b_dt = np.dtype(np.float16) if t.get("b_f16") else dt
    a = mem.view(t["a"], (m, k), dt).astype(np.float64)
    b = mem.view(t["b"], (k, n), b_dt).astype(np.float64)
    with _ieee():
        store(mem.view(t["c"], (m, n), dt), a @ b)


@reference("batched_sgemm")
def batched_sgemm(t: dict, mem: Memory) -> None:
    """``C[i] = A[i] @ B[i]`` for ``i < batch``; ``a_bcast`` / ``b_bcast``
    mean the operand holds one matrix reused by every batch (stride 0)."""
    dt, bt, m, k, n = fdt(t), t["batch"], t["m"], t["k"], t["n"]
    a = mem.view(t["a"], (1 if t.get("a_bcast") else bt, m, k), dt).astype(np.float64)
    b = mem.view(t["b"], (1 if t.get("b_bcast") else bt, k, n), dt).astype(np.float64)
    with _ieee():
        store(mem.view(t["c"], (bt, m, n), dt), np.broadcast_to(a @ b, (bt, m, n)))


@reference("fused_mm_bias_act")
def fused_mm_bias_act(t: dict, mem: Memory) -> None:
    """``C = act(A[m, k] @ W[k, n] + bias[n])`` (``act`` None = identity)."""
    dt, m, k, n = fdt(t), t["m"], t["k"], t["n"]
    a = mem.view(t["a"], (m, k), dt).astype(np.float64)
    w = mem.view(t["w"], (k, n), dt).astype(np.float64)
    bias = mem.view(t["bias"], n, dt).astype(np.float64)
    with _ieee():
        store(mem.view(t["c"], (m, n), dt), activate(t.get("act"), a @ w + bias))


@reference("grouped_matmul")
def grouped_matmul(t: dict, mem: Memory) -> None:
    """MoE GEMM: ``dst[i] = input[i] @ weight[expert_idx[i]]`` with input
    ``[m, k_dim]``, weight ``[num_experts, k_dim, n]``, expert_idx int32 ``[m]``
    (f32 operands)."""
    m, kd, n, ne = t["m"], t["k_dim"], t["n"], t["num_experts"]
    x = mem.view(t["input"], (m, kd), F32).astype(np.float64)
    w = mem.view(t["weight"], (ne, kd, n), F32).astype(np.float64)
    e = mem.view(t["expert_idx"], m, I32)
    if m and (e.min() < 0 or e.max() >= ne):
        raise IndexError(f"[grouped_matmul] expert index out of range 0..{ne}")
    store(mem.view(t["dst"], (m, n), F32), np.einsum("mk,mkn->mn", x, w[e]))
