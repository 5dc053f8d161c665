"""FFT on the 2N-real-block layout, log-mel features and Welch peaks.

Block layout: a complex row of length ``n`` is stored as ``2n`` reals,
``[re_0 .. re_{n−1}, im_0 .. im_{n−1}]``. FFT buffers are float64 when the
thunk's ``dtype`` is ``"f64"``, float16 for ``"f16"`` and float32 otherwise;
a ``"c64"`` FFT reads and writes its rows as numpy's complex64, i.e.
interleaved ``[re_0, im_0, re_1, im_1, ..]`` f32 pairs. The DFT is
evaluated in float64 (explicitly as a matrix product for odd,
non-power-of-two lengths too) and rounded once.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference

EPS_LOG_MEL = 1e-10


def fft_block_fn(
    x: np.ndarray, n: int, inverse: bool, norm_tag: int, real_input: bool
) -> np.ndarray:
    """``[outer, 2n]`` block rows (or ``[outer, n]`` reals) -> ``[outer, 2n]`` block rows.

    Forward ``X_k = Σ_j x_j e^{−2πi jk/n}``, inverse with ``+``; the factor is
    (forward, inverse) = ``(1, 1/n)`` for norm_tag 0 (backward), ``1/√n`` both
    ways for 1 (ortho), ``(1/n, 1)`` for 2 (forward)."""
    x = np.asarray(x, np.float64)
    z = x + 0j if real_input else x[:, :n] + 1j * x[:, n : 2 * n]
    j = np.arange(n)
    sign = 1.0 if inverse else -1.0
    # exact phase reduction: (j·k mod n) keeps the angle small for large n
    w = np.exp(sign * 2j * np.pi * ((j[:, None] * j[None, :]) % n) / n)
    out = z @ w
    if norm_tag == 1:
        out = out / np.sqrt(n)
    elif (norm_tag == 0 and inverse) or (norm_tag == 2 and not inverse):
        out = out / n
    return np.concatenate([out.real, out.imag], axis=1)


def _fdt(dtype: str) -> type:
    return {"f64": np.float64, "f16": np.float16}.get(dtype, np.float32)


@reference("fft1d")
def fft1d(t: dict, mem: Memory) -> None:
    """1-D complex DFT of each of ``outer`` rows (see :func:`fft_block_fn`)."""
    outer, n = t["outer"], t["n_complex"]
    if t.get("dtype") == "c64":
        z = mem.view(t["src"], (outer, n), np.complex64)
        block = np.concatenate([z.real, z.imag], axis=1)
        out = fft_block_fn(block, n, bool(t["inverse"]), int(t["norm_tag"]), False)
        mem.view(t["dst"], (outer, n), np.complex64)[...] = out[:, :n] + 1j * out[:, n:]
        return
    dt = _fdt(t.get("dtype", "f32"))
    real = bool(t.get("real_input", False))
    src = mem.view(t["src"], (outer, n if real else 2 * n), dt)
    out = fft_block_fn(src, n, bool(t["inverse"]), int(t["norm_tag"]), real)
    mem.view(t["dst"], (outer, 2 * n), dt)[...] = out


def power_fn(spec: np.ndarray, n_fft: int, n_bins: int) -> np.ndarray:
    """``|X_k|²`` for the first ``n_bins`` bins of block rows ``[outer, 2·n_fft]``."""
    re, im = spec[:, :n_bins], spec[:, n_fft : n_fft + n_bins]
    return re * re + im * im


def log_mel_fn(spec: np.ndarray, filters: np.ndarray, n_fft: int) -> np.ndarray:
    """``log(filters[n_mels, n_bins] @ |spec[:n_bins]|² + 1e-10)`` per row."""
    p = power_fn(np.asarray(spec, np.float64), n_fft, filters.shape[1])
    return np.log(p @ np.asarray(filters, np.float64).T + EPS_LOG_MEL)


def log_mel_backward_fn(
    spec: np.ndarray, filters: np.ndarray, dy: np.ndarray, n_fft: int
) -> np.ndarray:
    """Gradient w.r.t. the block spectrum: with ``mel = F p + ε``,
    ``d re_k = 2 re_k Σ_m dy_m F_mk / mel_m`` (same for im); bins ≥ n_bins get 0."""
    spec = np.asarray(spec, np.float64)
    f = np.asarray(filters, np.float64)
    nb = f.shape[1]
    mel = power_fn(spec, n_fft, nb) @ f.T + EPS_LOG_MEL
    dp = (np.asarray(dy, np.float64) / mel) @ f  # [outer, n_bins]
    out = np.zeros_like(spec)
    out[:, :nb] = 2.0 * spec[:, :nb] * dp
    out[:, n_fft : n_fft + nb] = 2.0 * spec[:, n_fft : n_fft + nb] * dp
    return out


@reference("log_mel")
def log_mel(t: dict, mem: Memory) -> None:
    """f32 log-mel of block spectra (see :func:`log_mel_fn`)."""
    o, nf, nb, nm = t["outer"], t["n_fft"], t["n_bins"], t["n_mels"]
    spec = mem.view(t["spec"], (o, 2 * nf), np.float32)
    f = mem.view(t["filters"], (nm, nb), np.float32)
    mem.view(t["dst"], (o, nm), np.float32)[...] = log_mel_fn(spec, f, nf)


@reference("log_mel_backward")
def log_mel_backward(t: dict, mem: Memory) -> None:
    """f32 gradient of :func:`log_mel_fn` w.r.t. ``spec`` (shape ``[outer, 2·n_fft]``)."""
    o, nf, nb, nm = t["outer"], t["n_fft"], t["n_bins"], t["n_mels"]
    spec = mem.view(t["spec"], (o, 2 * nf), np.float32)
    f = mem.view(t["filters"], (nm, nb), np.float32)
    dy = mem.view(t["dy"], (o, nm), np.float32)
    mem.view(t["dst"], (o, 2 * nf), np.float32)[...] = log_mel_backward_fn(spec, f, dy, nf)


def welch_peaks_fn(spec: np.ndarray, n_fft: int, n_segments: int, k: int) -> np.ndarray:
    """Welch periodogram peaks (Welch 1967): the power ``|X_f|²`` of the one-sided
    bins ``f = 0 .. n_fft//2`` averaged over each group of ``n_segments``
    consecutive rows, then the ``k`` largest bins' indices, largest first
    (ties: lower bin first), as float. ``k`` larger than the bin count pads
    with −1."""
    spec = np.asarray(spec, np.float64)
    nb = n_fft // 2 + 1
    p = power_fn(spec, n_fft, nb).reshape(-1, n_segments, nb).mean(axis=1)
    order = np.argsort(-p, axis=1, kind="stable")[:, :k].astype(np.float64)
    if k > nb:
        order = np.concatenate([order, np.full((p.shape[0], k - nb), -1.0)], axis=1)
    return order


@reference("welch_peaks")
def welch_peaks(t: dict, mem: Memory) -> None:
    """f32 ``[welch_batch, k]`` peak-bin indices (see :func:`welch_peaks_fn`)."""
    b, nf, ns, k = t["welch_batch"], t["n_fft"], t["n_segments"], t["k"]
    spec = mem.view(t["spec"], (b * ns, 2 * nf), np.float32)
    mem.view(t["dst"], (b, k), np.float32)[...] = welch_peaks_fn(spec, nf, ns, k)
