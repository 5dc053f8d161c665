"""Mixtral: the llama block with a mixture-of-experts FFN (softmax router,
top-k weights renormalised, SwiGLU experts; :mod:`rlx.models.moe`).

HF checkpoints store one tensor per expert
(``block_sparse_moe.experts.{e}.w1/w3/w2`` = gate / up / down) and the router
as ``block_sparse_moe.gate``; llama.cpp's converter writes Mixtral as GGUF
architecture ``llama`` with stacked ``ffn_*_exps`` (read by the llama family,
which turns MoE on when ``llama.expert_count`` is set)."""

from __future__ import annotations

from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig, common_config
from rlx.models.llama import config
from rlx.models.moe import hf_moe_spec
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "ffn_gate_inp.weight": "block_sparse_moe.gate.weight",
        "ffn_gate_exps.weight": "block_sparse_moe.experts.{e}.w1.weight",
        "ffn_up_exps.weight": "block_sparse_moe.experts.{e}.w3.weight",
        "ffn_down_exps.weight": "block_sparse_moe.experts.{e}.w2.weight",
    },
    hf_global=LLAMA_GLOBAL,
)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``mixtral`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    cfg = common_config(c, "mixtral", rope_kind="neox", layer_types=("full_attention",))
    win = c.get("sliding_window")
    if win is not None:
        if not isinstance(win, int) or win <= 0:
            raise c.fail("sliding_window", "must be a positive integer or null")
        cfg.windows = [win] * cfg.n_layers
    cfg.moe = hf_moe_spec(c, "intermediate_size", norm_topk=True)
    return cfg, ArchSpec()


FAMILY = Family("mixtral", config, hf_config, NAMES, model_types=("mixtral",))
