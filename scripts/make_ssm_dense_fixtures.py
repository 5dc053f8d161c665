"""Dense variants of two hybrid oracles of scripts/make_seq_fixtures.py (same
seed, training, noise, tokenizer, expected.npz layout): ``granitemoehybrid_dense``
(``num_local_experts=0``: shared MLP only) and ``jamba_dense``
(``num_experts=1``: JambaMLP on every layer), for the SSM hybrids whose MoE
FFN rlx does not build yet. Run with the peer venv (torch + transformers):
``/work/peer-venv/bin/python scripts/make_ssm_dense_fixtures.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_seq_fixtures as base  # noqa: E402

#: fixture name → (source spec, config overrides, note)
DENSE: dict[str, tuple[str, dict[str, Any], str]] = {
    "granitemoehybrid_dense": (
        "granitemoehybrid",
        {"num_local_experts": 0},
        "granitemoehybrid without experts (shared MLP only); granite multipliers != 1",
    ),
    "jamba_dense": (
        "jamba",
        {"num_experts": 1},
        "jamba with one expert (JambaMLP on every layer): mamba-1 + attention layers",
    ),
}

_spec = base.spec


def spec(name: str) -> tuple[str, str, dict[str, Any], str]:
    if name not in DENSE:
        return _spec(name)
    src, patch, note = DENSE[name]
    cls_name, module, kwargs, _ = _spec(src)
    return cls_name, module, {**kwargs, **patch}, note


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(2)
    base.spec = spec
    tok = base.make_tokenizer()
    for name in sys.argv[1:] or list(DENSE):
        print(base.make_hf(name, tok), flush=True)


if __name__ == "__main__":
    main()
