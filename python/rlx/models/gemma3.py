"""Gemma 3 (text): embeddings scaled by ``sqrt(hidden)``, RMSNorm on each
query / key head, post-attention and post-FFN norms, GELU-tanh MLP, NeoX
RoPE, and interleaved attention: every ``pattern``-th layer is global (RoPE
base ``rope.freq_base``, 1e6), the others see a sliding window of
``attention.sliding_window`` keys (512) with RoPE base 10 000.

llama.cpp's converter stores Gemma's norm weights as ``1 + γ`` (HF applies
``x̂·(1 + γ)``), so the GGUF vectors are plain RMSNorm gammas here (checked:
their values sit around 1, not 0). Scores use ``1/sqrt(head_dim)`` —
``query_pre_attn_scalar`` equals ``head_dim`` (256) for these models.
"""

from __future__ import annotations

from rlx.errors import WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, embed_scale_sqrt

#: Layer ``i`` is global when ``(i + 1) % PATTERN == 0`` (llama.cpp's default
#: for gemma3 when the file has no ``attention.sliding_window_pattern``).
PATTERN = 6
LOCAL_ROPE_BASE = 10000.0


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``gemma3`` file."""
    cfg = Config.from_gguf(f, rope_kind="neox")
    window = f.arch_int("attention.sliding_window", 512)
    raw = f.get(f"{cfg.arch}.attention.sliding_window_pattern", PATTERN)
    if isinstance(raw, list):
        local = [bool(x) for x in raw]  # newer files: one flag per layer (True = SWA)
        if len(local) != cfg.n_layers:
            raise WeightFormatError(
                f"[gemma3] {f.path}: sliding_window_pattern has {len(local)} entries "
                f"for {cfg.n_layers} layers"
            )
    else:
        pattern = int(raw)
        local = [pattern > 0 and (i + 1) % pattern != 0 for i in range(cfg.n_layers)]
    local_base = f.arch_float("rope.freq_base_swa", LOCAL_ROPE_BASE)
    for i in range(cfg.n_layers):
        if local[i]:
            cfg.windows[i] = window
            cfg.rope_bases[i] = local_base
    spec = ArchSpec(
        qk_norm=True, post_norms=True, act="gelu_approx", embed_scale=embed_scale_sqrt(cfg.hidden)
    )
    return cfg, spec
