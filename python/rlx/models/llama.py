"""Llama (SmolLM2, Llama 2/3): the plain pre-norm block, SwiGLU MLP, GQA.

llama.cpp's converter permutes the Q/K rows of HF llama checkpoints so that
RoPE rotates adjacent pairs (its "normal" rope mode): GGUF llama uses
``rope_kind="interleaved"``; an HF directory keeps the original rows and
rotates halves (``"neox"``). The output matrix is the token embedding when
there is no ``output.weight`` (``lm_head.weight``).
"""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig, common_config
from rlx.models.moe import gguf_moe_spec
from rlx.models.source import LLAMA_NAMES


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``llama`` file."""
    cfg = Config.from_gguf(f, rope_kind="interleaved")
    # llama.cpp converts Mixtral to ``llama`` with stacked experts
    cfg.moe = gguf_moe_spec(f, norm_default=True)
    return cfg, ArchSpec()


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``llama`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    # attention_bias also puts a bias on o_proj, which the block has no slot for
    c.require_false("attention_bias", "mlp_bias")
    return common_config(c, "llama", rope_kind="neox", layer_types=("full_attention",)), ArchSpec()


FAMILY = Family("llama", config, hf_config, LLAMA_NAMES, model_types=("llama",))
