"""Gemma 3 (text): embeddings scaled by ``sqrt(hidden)``, RMSNorm on each
query / key head, post-attention and post-FFN norms, GELU-tanh MLP, NeoX
RoPE, and interleaved attention: every ``pattern``-th layer is global (RoPE
base ``rope.freq_base``, 1e6), the others see a sliding window of
``attention.sliding_window`` keys (512) with RoPE base 10 000.

llama.cpp's converter stores Gemma's norm weights as ``1 + γ`` (HF applies
``x̂·(1 + γ)``), so the GGUF vectors are plain RMSNorm gammas here (checked:
their values sit around 1, not 0). Scores use ``1/sqrt(head_dim)`` —
``query_pre_attn_scalar`` equals ``head_dim`` (256) for these models.

An HF directory (``model_type`` ``gemma3_text``) stores the norm weights as
``γ`` (the source adds 1: :attr:`NameMap.norm_plus_one`), names the layer
types (``layer_types``: ``sliding_attention`` / ``full_attention``, or the
older ``sliding_window_pattern``), the local RoPE base
(``rope_local_base_freq`` or ``rope_parameters.sliding_attention``), the
score scale (``query_pre_attn_scalar``) and RoPE scaling of the global layers.
"""

from __future__ import annotations

from rlx.errors import WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family, embed_scale_sqrt
from rlx.models.hf_config import FULL, SLIDING, HFConfig, common_config
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

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


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``gemma3_text`` directory."""
    c.require_in("hidden_activation", ("gelu_pytorch_tanh",), "gelu_pytorch_tanh")
    c.require_false(
        "attn_logit_softcapping", "final_logit_softcapping", "use_bidirectional_attention",
        "attention_bias",
    )  # fmt: skip
    if c.get("layer_types") is None:
        n = c.get_int("num_hidden_layers")
        pattern = c.get_int("sliding_window_pattern", PATTERN)
        c.data["layer_types"] = [
            SLIDING if pattern > 0 and (i + 1) % pattern != 0 else FULL for i in range(n)
        ]
    cfg = common_config(c, "gemma3", rope_kind="neox", default_theta=1e6, tied_default=True)
    cfg.score_scale = c.get_float("query_pre_attn_scalar", cfg.head_dim) ** -0.5
    spec = ArchSpec(
        qk_norm=True, post_norms=True, act="gelu_approx", embed_scale=embed_scale_sqrt(cfg.hidden)
    )
    return cfg, spec


#: HF Gemma 3: a pre- and a post-norm around attention and around the MLP.
NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "post_attention_norm.weight": "post_attention_layernorm.weight",
        "ffn_norm.weight": "pre_feedforward_layernorm.weight",
        "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    },
    hf_global=LLAMA_GLOBAL,
    norm_plus_one=True,
)

FAMILY = Family("gemma3", config, hf_config, NAMES, model_types=("gemma3_text",))
