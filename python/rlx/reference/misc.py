"""Misc thunks: ``nop``, vector-quantiser assignment, SPD-manifold ops, custom ops.

Operand lists. Thunks that carry ``inputs: [(offset, len, shape)]`` and
``output: (offset, len, shape)`` (``spd_host``, ``custom_op``,
``custom_gpu_op``, and ``host_op`` / ``scan_host`` in
:mod:`rlx.reference.interp`) arrive as lists ``[offset, len, {"dims": [...],
"dtype": "f32"}]``. Each buffer is read with the element type of its own
``Shape`` (so an SPD operand declared ``f64`` is read as float64).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rlx.reference import Memory, reference

#: Registered user ops (``rlx.register_op`` fills it): name -> ``fn(inputs, output, attrs)``
#: where ``inputs`` are read-only-by-convention numpy views shaped by their
#: ``Shape``, ``output`` is the writable output view and ``attrs`` the raw
#: attribute bytes. The function writes ``output`` in place.
CUSTOM_OPS: dict[str, Callable[[list[np.ndarray], np.ndarray, bytes], None]] = {}

_NP_DTYPES = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,  # raw bits; numpy has no bfloat16
    "f64": np.float64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u32": np.uint32,
    "bool": np.bool_,
    "c64": np.complex64,
}


def np_dtype(dt: str) -> np.dtype:
    """numpy dtype of an rlx ``DType`` string."""
    return np.dtype(_NP_DTYPES[dt])


def static_dims(shape: dict) -> tuple[int, ...]:
    dims = shape["dims"]
    if not all(isinstance(d, int) for d in dims):
        raise ValueError(f"[reference] symbolic dims {dims} must be bound before execution")
    return tuple(dims)


def operand_view(mem: Memory, entry: list) -> np.ndarray:
    """View of an ``(offset, len, shape)`` or ``(offset, shape)`` operand, shaped
    and typed by its Shape."""
    off, shape = entry[0], entry[-1]
    return mem.view(off, static_dims(shape), np_dtype(shape["dtype"]))


@reference("nop")
def nop(t: dict, mem: Memory) -> None:
    """Does nothing."""


# ---------------------------------------------------------------- VQ


def vq_assign_fn(x: np.ndarray, cb: np.ndarray, metric: int) -> np.ndarray:
    """Nearest codebook row per ``x`` row (float64). 0 = L2: argmin ``‖x − c‖²``;
    1 = dot: argmax ``x·c``; 2 = cosine: argmax ``x·c / (max(‖x‖, 1e-12)·max(‖c‖,
    1e-12))``. Ties resolve to the lowest index. Returns int32 ``[n]``."""
    x = np.asarray(x, np.float64)
    cb = np.asarray(cb, np.float64)
    dot = x @ cb.T
    if metric == 0:
        score = -((x * x).sum(1)[:, None] - 2.0 * dot + (cb * cb).sum(1)[None, :])
    elif metric == 1:
        score = dot
    elif metric == 2:
        nx = np.maximum(np.linalg.norm(x, axis=1), 1e-12)
        nc = np.maximum(np.linalg.norm(cb, axis=1), 1e-12)
        score = dot / nx[:, None] / nc[None, :]
    else:
        raise ValueError(f"[vq_assign] unknown metric {metric}")
    return np.argmax(score, axis=1).astype(np.int32)


@reference("vq_assign")
def vq_assign(t: dict, mem: Memory) -> None:
    """x ``[n, d]`` f32, cb ``[k, d]`` f32 -> out int32 ``[n]`` (see :func:`vq_assign_fn`)."""
    n, d, k = t["n"], t["d"], t["k"]
    x = mem.view(t["x"], (n, d), np.float32)
    cb = mem.view(t["cb"], (k, d), np.float32)
    mem.view(t["out"], n, np.int32)[...] = vq_assign_fn(x, cb, int(t["metric"]))


# ---------------------------------------------------------------- SPD


def _eig_apply(x: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``U f(Λ) Uᵀ`` for symmetric ``x [..., n, n]``."""
    lam, u = np.linalg.eigh(x)
    return (u * f(lam)[..., None, :]) @ np.swapaxes(u, -1, -2)


def _sym(x: np.ndarray):
    return 0.5 * (x + np.swapaxes(x, -1, -2))


def karcher_mean(x: np.ndarray, tol: float, max_iter: int = 100) -> np.ndarray:
    """Affine-invariant Karcher (Fréchet) mean of SPD ``x [b, n, n]`` by the fixed point
    ``G ← G^½ exp(mean_i log(G^{-½} X_i G^{-½})) G^½`` from the arithmetic mean, until
    ``‖mean log‖_F < tol`` (``tol ≤ 0`` → 1e-12) or ``max_iter`` steps."""
    tol = tol if tol > 0 else 1e-12
    g = x.mean(0)
    for _ in range(max_iter):
        gh = _eig_apply(g, np.sqrt)
        gih = _eig_apply(g, lambda v: 1.0 / np.sqrt(v))
        step = _eig_apply(_sym(gih @ x @ gih), np.log).mean(0)
        g = _sym(gh @ _eig_apply(step, np.exp) @ gh)
        if np.linalg.norm(step) < tol:
            break
    return g


def spd_forward(kind: str, eps: float, args: list[np.ndarray]) -> np.ndarray:
    """SPDNet layers (Huang & Van Gool, "A Riemannian Network for SPD Matrix Learning",
    AAAI 2017) and Riemannian batch norm (Brooks et al., "Riemannian batch
    normalization for SPD neural networks", NeurIPS 2019), float64:

    * ``bi_map``: ``Wᵀ X W``, x ``[b, n, n]``, w ``[n, m]`` -> ``[b, m, m]``.
    * ``re_eig``: ``U max(Λ, eps) Uᵀ``; ``log_eig``: ``U log(Λ) Uᵀ``.
    * ``batch_norm``: ``B^½ G^{-½} X_i G^{-½} B^½`` with ``G`` the batch's Karcher
      mean (tolerance ``eps``) and ``B`` the bias ``[n, n]`` (parallel transport
      of the batch from ``G`` to ``B``; no variance rescaling).
    * ``karcher_mean``: ``[b, n, n]`` -> ``[n, n]`` (tolerance ``eps``)."""
    x = np.asarray(args[0], np.float64)
    if kind == "bi_map":
        w = np.asarray(args[1], np.float64)
        return np.swapaxes(w, -1, -2) @ x @ w
    if kind == "re_eig":
        return _eig_apply(_sym(x), lambda v: np.maximum(v, eps))
    if kind == "log_eig":
        return _eig_apply(_sym(x), np.log)
    if kind == "karcher_mean":
        return karcher_mean(_sym(x), eps)
    if kind == "batch_norm":
        g = karcher_mean(_sym(x), eps)
        gih = _eig_apply(g, lambda v: 1.0 / np.sqrt(v))
        bh = _eig_apply(_sym(np.asarray(args[1], np.float64)), np.sqrt)
        return _sym(bh @ gih @ x @ gih @ bh)
    raise KeyError(f"[spd] unknown SPD op '{kind}'")


def _daleckii_krein(x: np.ndarray, dy: np.ndarray, f: Callable, fprime: Callable):
    """Gradient of ``U f(Λ) Uᵀ`` (Daleckii–Krein / Ionescu et al. 2015):
    ``U (L ∘ Uᵀ sym(dY) U) Uᵀ`` with ``L_ij = (f(λ_i) − f(λ_j))/(λ_i − λ_j)``, ``f'(λ_i)``
    on (near-)equal eigenvalues."""
    lam, u = np.linalg.eigh(_sym(x))
    fl = f(lam)
    dl = lam[..., :, None] - lam[..., None, :]
    df = fl[..., :, None] - fl[..., None, :]
    near = np.abs(dl) <= 1e-12 * np.maximum(1.0, np.abs(lam[..., :, None]))
    fp = fprime(lam)
    lmat = np.where(near, 0.5 * (fp[..., :, None] + fp[..., None, :]), df / np.where(near, 1.0, dl))
    ut = np.swapaxes(u, -1, -2)
    return u @ (lmat * (ut @ _sym(dy) @ u)) @ ut


def _karcher_mean_vjp(x: np.ndarray, g: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Exact gradient ``[b, n, n]`` of ``⟨dY, G(X)⟩`` for the Karcher mean ``G`` of SPD
    ``x [b, n, n]`` (symmetric gradient, as :func:`spd_backward`).

    ``G`` is defined implicitly by ``F(G, X) = Σ_i log(G^{-½} X_i G^{-½}) = 0`` (Moakher,
    SIAM J. Matrix Anal. Appl. 26(3), 2005; Brooks et al., "Riemannian batch
    normalization for SPD neural networks", NeurIPS 2019). By the implicit function
    theorem ``dG = −(∂F/∂G)^{-1} Σ_i (∂F/∂X_i)[dX_i]``, with ``S = G^{-½}``,
    ``Y_i = S X_i S`` and the Fréchet derivatives (Daleckii–Krein, Higham, "Functions
    of Matrices", SIAM 2008, ch. 3 / Thm 3.11)::

        ∂F/∂G [E]   = Σ_i Dlog(Y_i)[dS X_i S + S X_i dS],  dS = D(·)^{-½}(G)[E]
        ∂F/∂X_i [E] = Dlog(Y_i)[S E S]

    Both are assembled as dense matrices on the ``n(n+1)/2`` symmetric coordinates
    (upper-triangle entries; basis ``E_ii``, ``E_ij + E_ji``) and the transposed
    system is solved for the cotangent, so the result is exact up to round-off and
    the forward's convergence tolerance."""
    b, n, _ = x.shape
    iu, ju = np.triu_indices(n)
    p = iu.size
    basis = np.zeros((p, n, n))
    basis[np.arange(p), iu, ju] = 1.0
    basis[np.arange(p), ju, iu] = 1.0
    s = _eig_apply(g, lambda v: 1.0 / np.sqrt(v))
    y = _sym(s @ x @ s)
    sx = s @ x  # [b, n, n]
    jg = np.zeros((p, p))  # ∂F/∂G: rows = output coords, cols = input coords
    jx = np.zeros((b, p, p))  # ∂F/∂X_i
    for k in range(p):
        ds = _daleckii_krein(g, basis[k], lambda v: v**-0.5, lambda v: -0.5 * v**-1.5)
        dyi = ds @ x @ s + sx @ ds
        jg[:, k] = _daleckii_krein(y, dyi, np.log, lambda v: 1.0 / v).sum(0)[iu, ju]
        jx[:, :, k] = _daleckii_krein(y, s @ basis[k] @ s, np.log, lambda v: 1.0 / v)[:, iu, ju]
    # dL = w · c(dG) with c(·) the coordinates: w_k = ⟨sym(dY), E_k⟩
    w = np.einsum("ij,kij->k", _sym(np.asarray(dy, np.float64)), basis)
    v = np.linalg.solve(jg.T, w)
    gc = -np.einsum("bok,o->bk", jx, v)  # dL = Σ_i gc_i · c(dX_i)
    out = np.zeros((b, n, n))
    scale = np.where(iu == ju, 1.0, 0.5)  # ⟨Gr, dX⟩ = Σ_{i≤j} Gr_ij c_ij (2 if i≠j)
    out[:, iu, ju] = gc * scale
    out[:, ju, iu] = gc * scale
    return out


def spd_backward(kind: str, eps: float, args: list[np.ndarray], dy: np.ndarray) -> np.ndarray:
    """Gradient w.r.t. the first operand (float64). For symmetric-input ops the
    result is the symmetric gradient: ``⟨dY, d f(X)⟩ = ⟨G, dX⟩`` for symmetric ``dX``.
    ``bi_map``: ``W dY Wᵀ``; ``re_eig`` / ``log_eig``: Daleckii–Krein;
    ``karcher_mean`` / ``batch_norm``: implicit differentiation of the Karcher mean
    (:func:`_karcher_mean_vjp`; for batch norm also through ``G^{-½}``, the bias is held
    fixed). An unknown kind raises ``KeyError``."""
    x = np.asarray(args[0], np.float64)
    dy = np.asarray(dy, np.float64)
    if kind == "bi_map":
        w = np.asarray(args[1], np.float64)
        return w @ dy @ np.swapaxes(w, -1, -2)
    if kind == "re_eig":
        return _daleckii_krein(
            x, dy, lambda v: np.maximum(v, eps), lambda v: (v > eps).astype(np.float64)
        )
    if kind == "log_eig":
        return _daleckii_krein(x, dy, np.log, lambda v: 1.0 / v)
    if kind == "karcher_mean":
        xs = _sym(x)
        return _karcher_mean_vjp(xs, karcher_mean(xs, eps), dy)
    if kind == "batch_norm":
        # Y_i = sym(B^½ S X_i S B^½), S = G^{-½}, G = KarcherMean(X).
        xs = _sym(x)
        g = karcher_mean(xs, eps)
        s = _eig_apply(g, lambda v: 1.0 / np.sqrt(v))
        bh = _eig_apply(_sym(np.asarray(args[1], np.float64)), np.sqrt)
        z = bh @ _sym(dy) @ bh  # [b, n, n], cotangent pulled through B^½ · B^½
        direct = _sym(s @ z @ s)  # through the explicit X_i
        # through S: ⟨Z_i, dS X_i S + S X_i dS⟩ = ⟨Z_i S X_i + X_i S Z_i, dS⟩
        ws = (z @ s @ xs + xs @ s @ z).sum(0)
        # through G: dS = D(·)^{-½}(G)[dG], a self-adjoint Fréchet derivative
        wg = _daleckii_krein(g, ws, lambda v: v**-0.5, lambda v: -0.5 * v**-1.5)
        return direct + _karcher_mean_vjp(xs, g, wg)
    raise KeyError(f"[spd_backward] unknown SPD op '{kind}'")


@reference("spd_host")
def spd_host(t: dict, mem: Memory) -> None:
    """``t["op"]`` is the IR op: ``{"op": "spd", "kind": ..., "eps": ...}`` (operands as
    :func:`spd_forward`) or ``{"op": "spd_backward", ...}`` (the forward's operands
    then ``dy``). Computed in float64, stored in the output's dtype."""
    op = t["op"]
    args = [operand_view(mem, e) for e in t["inputs"]]
    out = operand_view(mem, t["output"])
    if op["op"] == "spd":
        res = spd_forward(op["kind"], float(op.get("eps", 0.0)), args)
    elif op["op"] == "spd_backward":
        res = spd_backward(op["kind"], float(op.get("eps", 0.0)), args[:-1], args[-1])
    else:
        raise KeyError(f"[spd_host] not an SPD op: {op['op']!r}")
    out[...] = res.reshape(out.shape)


# ---------------------------------------------------------------- custom ops


def _run_custom(t: dict, mem: Memory) -> None:
    name = t["kernel"]
    fn = CUSTOM_OPS.get(name)
    if fn is None:
        raise KeyError(f"[{t['name']}] no custom op registered under '{name}'")
    inputs = [operand_view(mem, e) for e in t["inputs"]]
    fn(inputs, operand_view(mem, t["output"]), bytes(t.get("attrs", b"")))


@reference("custom_op")
def custom_op(t: dict, mem: Memory) -> None:
    """User op ``t["kernel"]`` (its registered name) from :data:`CUSTOM_OPS`."""
    _run_custom(t, mem)


@reference("custom_gpu_op")
def custom_gpu_op(t: dict, mem: Memory) -> None:
    """As ``custom_op``: on the reference device a raw-GPU op runs its host function."""
    _run_custom(t, mem)
