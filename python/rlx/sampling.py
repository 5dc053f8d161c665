"""Next-token sampling: greedy, temperature, top-k, top-p (nucleus), seeded.

:func:`distribution` gives the exact probabilities a setting samples from;
:func:`sample` draws one id from it with a ``numpy.random.Generator``
(greedy — ``temperature == 0`` — is the arg-max, lowest id on ties).

Order of the filters (as in HF ``generate``): temperature scaling, then
top-k (keep the ``k`` largest logits; ties at the boundary are kept by id
order), then top-p (keep the smallest prefix of tokens sorted by probability
whose mass reaches ``top_p``; the most likely token always stays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from rlx.errors import RlxError


@dataclass(frozen=True)
class SamplingParams:
    """``temperature`` 0 = greedy; ``top_k`` 0 = off; ``top_p`` 1.0 = off."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def check(self) -> None:
        """Raise :class:`rlx.RlxError` on an out-of-range setting."""
        if not self.temperature >= 0.0:
            raise RlxError(f"[sampling] temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise RlxError(f"[sampling] top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise RlxError(f"[sampling] top_p must be in (0, 1], got {self.top_p}")


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The float64 probabilities over the vocabulary that :func:`sample` draws
    from (one-hot on the arg-max when greedy)."""
    params.check()
    z = np.asarray(logits, np.float64).reshape(-1)
    out = np.zeros_like(z)
    if params.temperature == 0.0:
        out[int(np.argmax(z))] = 1.0
        return out
    z = z / params.temperature
    order = np.argsort(-z, kind="stable")  # descending, ties by id
    if params.top_k > 0:
        order = order[: params.top_k]
    zs = z[order]
    p = np.exp(zs - zs[0])
    p /= p.sum()
    if params.top_p < 1.0:
        cum = np.cumsum(p)
        keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    out[order] = p
    return out


def sample(
    logits: np.ndarray, params: SamplingParams, rng: Optional[np.random.Generator] = None
) -> int:
    """One token id from ``logits`` (``[vocab]``) under ``params``."""
    if params.temperature == 0.0:
        params.check()
        return int(np.argmax(np.asarray(logits).reshape(-1)))
    p = distribution(logits, params)
    gen = rng if rng is not None else np.random.default_rng()
    nz = np.flatnonzero(p)
    return int(nz[gen.choice(len(nz), p=p[nz] / p[nz].sum())])
