"""Regenerate the tiny-model and recurrent-layer oracle fixtures from torch / transformers.

No model hub is reachable, so the oracles are tiny models built from transformers' own
config classes (hidden 64, 2-4 layers, vocab 512, float32, eager attention, transformers'
plain torch paths: no fused kernels; transformers' default init range 0.02, as the 0.1
the random fixtures used left a trained llama ~2.8x as sensitive to F16 rounding),
**trained briefly** on the fixed English ``TEXT`` below, with noise added to every 1-D
parameter (and to Mamba-1's 2-D ``A_log``) so that a dropped norm weight / bias /
``A_log`` / ``dt_bias`` / ``D`` cannot go unnoticed. Everything is seeded and the training
is deterministic (one thread, ``torch.use_deterministic_algorithms``): a re-run writes the
same numbers.

Why train: real LLMs are trained, and a trained model's logits have a clear winner.
A random model's logits are flat and Gaussian-like over the 512 tokens (top-2 gap ~0.2
of a row's std), so any weight rounding flips greedy tokens and a GGUF F16 / Q8_0
check against it measures the random init, not the loader (tests/models/
test_gguf_accuracy.py). ``build``: seeded init, ``condition`` (gated-delta-net
fixtures), ``fixture_conditioning.fit`` on the whole tokenised ``TEXT`` (355 tokens,
next-token cross entropy, AdamW, ``TRAIN_STEPS`` = 200), the 1-D noise, then
``RETRAIN_STEPS`` = 60 more steps with the noised parameters frozen: the noise alone
undoes much of the fit of the SSM models (cross entropy 0.008 -> 0.93 on mamba2, 0.02 ->
4.9 on granitemoehybrid_dense), and the 2-D weights adapt to the noised values, so
dropping any of them is still caught. The fixtures end at 3e-4 to 2e-2 nats per token
(top-1 accuracy 1 on the text, a top-2 logit gap of several row stds); meta.json
``training`` records each fixture's steps and losses. ``ids24`` /
``ids80`` are the first tokens of that same text. (The MoE fixtures of
scripts/make_moe_fixtures.py share ``build`` but stay random: ``train=False``.)

What it writes (all under ``tests/fixtures/``):

* ``hf/<name>/``: ``config.json`` + ``model.safetensors`` (``save_pretrained``,
  safetensors), ``tokenizer.json`` + ``tokenizer_config.json`` (a byte-level BPE with
  the GPT-2 pre-tokenizer regex, vocab 512, trained here on a fixed English text),
  ``expected.npz`` (float32 logits, int64 ids) and ``meta.json`` (versions, the
  config dict, notes). npz keys:

  - ``ids24`` [24], ``logits24`` [24, vocab]: one full forward over ``ids24``;
  - ``prefill16_decode8`` [24, vocab]: a 16-token prefill (all 16 rows) then 8
    one-token decode steps through the cache object the model returns
    (``use_cache=True``): the recurrent / KV-cache decode form over ``ids24``;
  - ``ids80`` [80] (``ids80[:24] == ids24``), ``logits80`` [80, vocab]: longer than
    one gated-delta-net chunk (64).

* ``rnn/<mode>_l<layers>_<uni|bi>_<bf|sf>_<h0|noh0>.npz`` (scripts/make_rnn_fixtures.py):
  ``torch.nn.LSTM`` / ``GRU``
  / ``RNN`` (tanh and relu) with input 5, hidden 7, seq 9, batch 3; every weight under
  torch's own name (``weight_ih_l0``, ``weight_hh_l1_reverse``, ``bias_ih_l0`` ...),
  ``x``, ``h0`` / ``c0`` (when given), ``output``, ``h_n`` (and ``c_n`` for LSTM), plus
  0-d ``num_layers``, ``bidirectional``, ``batch_first``, ``hidden_size``.

* ``gguf/<name>-<type>.gguf`` (``--what gguf``; ``--gguf-types`` among f32, f16, q8_0;
  committed: q8_0 and f16 for every convertible model but gemma3 (f16: the accuracy oracle
  of tests/models/test_gguf_accuracy.py), and f32 for the SSM / linear-attention ones
  (``--models ssm_gguf --gguf-types f32``, ~0.4-1.3 MB each: the exact-logits oracle of
  tests/models/test_gguf_ssm.py); the Q8_0 files keep their 1-D tensors in F32 and their
  2-D ones within Q8_0 error of the safetensors): the ``hf/<name>`` models
  converted by llama.cpp's ``convert_hf_to_gguf.py`` (``--converter PATH``; it is
  vendored in the llama-cpp-python sdist, not in this repo). The converter refuses a
  BPE tokenizer whose pre-tokenizer hash it does not know; ours uses the GPT-2
  pre-tokenizer regex, so this script patches the converter's
  ``get_vocab_base_pre`` to answer ``"gpt-2"``, and makes Jamba's converter (which wants
  a sentencepiece vocabulary) write the same BPE through its GPT-2 path, and makes
  GraniteMoeHybrid's converter read our ``layer_types`` names and keep RoPE (see
  ``_CONVERT_SHIM``). Qwen3-Next and
  Qwen3.5 are converted with ``--no-mtp``. A model the converter refuses is reported and
  skipped (llama.cpp's Qwen3-Next has no dense-MLP layers: ``qwen3_next_dense`` fails).

The gated-delta-net fixtures (``CONDITIONED``) get a conditioned init (``condition``:
state decay range and query/key correlation) before the training; every fixture's
meta.json records how far dropping each parameter's noise moves the logits
(``drop_effect_min``, asserted > ``DROP_MIN``) and the least sensitive parameter with its
noise. The noise is ``NOISE`` = 0.1 times a standard normal, ``A_LOG_NOISE`` on the
``A_log`` of the fixtures listed there.

Run it with the peer python (torch + transformers live outside the repo's .venv, see
``scripts/setup_peers.sh``)::

    /work/peer-venv/bin/python scripts/make_seq_fixtures.py                  # hf + rnn
    /work/peer-venv/bin/python scripts/make_seq_fixtures.py --what hf --models llama qwen3
    /work/peer-venv/bin/python scripts/make_seq_fixtures.py --what gguf \\
        --converter $SDIST/vendor/llama.cpp/convert_hf_to_gguf.py

where ``$SDIST`` is the untarred llama-cpp-python 0.3.36 sdist (``pip download --no-deps
--no-binary llama-cpp-python llama-cpp-python==0.3.36``; ``scripts/setup_peers.sh`` puts it
in ``$RLX_PEER_VENV/build/``).

``tests/models/test_seq_fixtures.py`` checks the files are well formed (no torch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from fixture_conditioning import (
    CONDITIONED,
    DROP_MIN,
    GDN_A_RANGE,
    GDN_QK,
    RETRAIN_STEPS,
    TRAIN_STEPS,
    _saved_name,
    condition,
    drop_effects,
    fit,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HF_DIR = FIXTURES / "hf"
RNN_DIR = FIXTURES / "rnn"
GGUF_DIR = FIXTURES / "gguf"
VOCAB = 512
HIDDEN = 64
SEED = 1234
NOISE = 0.1
#: a larger A_log noise where NOISE moves the logits too little once trained: Falcon-H1's
#: layer-0 Mamba2 heads (dt_bias 1: the state is forgotten within a token or two) moved
#: them by 7e-5 of max|logit| (< DROP_MIN); Mamba2's own dt init (0.001-0.1) made it 8e-6
A_LOG_NOISE = {"falcon_h1": 0.5}

#: Fixed English text the tokenizer is trained on and the ids are cut from.
TEXT = (
    "The quick brown fox jumps over the lazy dog. A small model reads a short text, "
    "one token at a time, and keeps what it has seen in a cache or in a recurrent state. "
    "When the sequence is longer than one chunk, the chunked form and the recurrent form "
    "must agree on every position. The river runs past the old mill, under the stone "
    "bridge, and out into the green valley where the farmers grow wheat and barley. "
    "In the morning the market opens early; people buy bread, cheese, apples and fish, "
    "and talk about the weather, the harvest and the news from the town. Numbers such as "
    "1, 2, 3, 10, 42 and 2024 appear too, with some punctuation: commas, colons; dashes - "
    "and (parentheses). Every layer of the network has weights, biases and norms, and "
    "each of them must be loaded, or the output will differ from the reference. "
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells. "
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood? "
    "Programs are written for people to read, and only incidentally for machines to run."
)
SPECIAL = "<|endoftext|>"


# --------------------------------------------------------------------------- tokenizer


def make_tokenizer() -> Any:
    """A byte-level BPE (GPT-2 pre-tokenizer regex) with ``VOCAB`` entries, trained on TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] * 4, trainer=trainer)
    # the trainer may stop short of VOCAB when merges run out; the model's vocab is VOCAB
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    return tok


def save_tokenizer(tok: Any, out: Path) -> None:
    """tokenizer.json + tokenizer_config.json through transformers' fast tokenizer."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL, eos_token=SPECIAL, pad_token=SPECIAL
    )
    fast.save_pretrained(str(out))


def fixed_ids(tok: Any) -> tuple[np.ndarray, np.ndarray]:
    """ids24 and ids80 (ids80[:24] == ids24) from TEXT."""
    ids = tok.encode(TEXT).ids
    assert len(ids) >= 80, len(ids)
    ids80 = np.asarray(ids[:80], dtype=np.int64)
    return ids80[:24].copy(), ids80


# --------------------------------------------------------------------------- models


def _rope(theta: float = 10000.0) -> dict[str, Any]:
    return {"rope_type": "default", "rope_theta": theta}


def _common(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        initializer_range=0.02,
        pad_token_id=None,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=True,
    )
    base.update(kw)
    return base


def _attn(**kw: Any) -> dict[str, Any]:
    base = _common(
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rope_parameters=_rope(),
    )
    base.update(kw)
    return base


def _gdn(**kw: Any) -> dict[str, Any]:
    """Qwen3-Next / Qwen3.5 text: 3 gated-delta-net layers + 1 gated attention layer.

    linear_key_head_dim == linear_value_head_dim == 16, 2 key heads and 4 value heads
    (num_v_heads / num_k_heads = 2)."""
    return _attn(
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
        **kw,
    )


_MOE = dict(
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
)


def spec(name: str) -> tuple[str, str, dict[str, Any], str]:
    """(config class, transformers module, kwargs, note) of a fixture."""
    specs: dict[str, tuple[str, str, dict[str, Any], str]] = {
        "llama": ("LlamaConfig", "llama", _attn(num_hidden_layers=2), ""),
        "qwen2": ("Qwen2Config", "qwen2", _attn(num_hidden_layers=2), "q/k/v biases"),
        "qwen3": ("Qwen3Config", "qwen3", _attn(num_hidden_layers=2), "q_norm / k_norm"),
        "gemma3": (
            "Gemma3TextConfig",
            "gemma3",
            _attn(
                num_hidden_layers=3,
                num_key_value_heads=1,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                sliding_window=8,
                query_pre_attn_scalar=24,
                rope_parameters={
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                },
            ),
            "Gemma3ForCausalLM (text only); sliding window 8 so 24/80-token inputs exceed it; "
            "query_pre_attn_scalar 24 != head_dim 16",
        ),
        "lfm2": (
            "Lfm2Config",
            "lfm2",
            _common(
                intermediate_size=96,
                block_auto_adjust_ff_dim=False,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=256,
                layer_types=["conv", "full_attention", "conv"],
                conv_L_cache=3,
                rope_parameters=_rope(),
            ),
            "short-conv (L_cache 3) + GQA attention layers",
        ),
        "qwen3_next": (
            "Qwen3NextConfig",
            "qwen3_next",
            _gdn(decoder_sparse_step=1, norm_topk_prob=True, **_MOE),
            "MoE 4 experts top-2 + shared expert (the MoE part belongs to another issue); "
            "linear k/v head dim 16, num_k_heads 2, num_v_heads 4",
        ),
        "qwen3_next_dense": (
            "Qwen3NextConfig",
            "qwen3_next",
            _gdn(mlp_only_layers=[0, 1, 2, 3], **_MOE),
            "dense MLP on every layer (mlp_only_layers); num_k_heads 2, num_v_heads 4",
        ),
        "qwen3_5": (
            "Qwen3_5TextConfig",
            "qwen3_5",
            _gdn(),
            "Qwen3_5ForCausalLM text decoder (dense); num_k_heads 2, num_v_heads 4",
        ),
        "qwen3_5_moe": (
            "Qwen3_5MoeTextConfig",
            "qwen3_5_moe",
            _gdn(**{k: v for k, v in _MOE.items()}),
            "Qwen3_5MoeForCausalLM text decoder, 4 experts top-2 + shared expert "
            "(MoE: other issue)",
        ),
        "mamba2": (
            "Mamba2Config",
            "mamba2",
            _common(
                num_hidden_layers=2,
                num_heads=8,
                head_dim=16,
                state_size=16,
                expand=2,
                conv_kernel=4,
                n_groups=1,
                chunk_size=32,
            ),
            "n_groups 1, SSD chunk 32",
        ),
        "mamba2_g2": (
            "Mamba2Config",
            "mamba2",
            _common(
                num_hidden_layers=2,
                num_heads=8,
                head_dim=16,
                state_size=16,
                expand=2,
                conv_kernel=4,
                n_groups=2,
                chunk_size=32,
            ),
            "n_groups 2, SSD chunk 32",
        ),
        "mamba": (
            "MambaConfig",
            "mamba",
            _common(num_hidden_layers=2, state_size=16, expand=2, conv_kernel=4, use_mambapy=False),
            "selective scan (sequential torch path)",
        ),
        "falcon_h1": (
            "FalconH1Config",
            "falcon_h1",
            _common(
                intermediate_size=96,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                max_position_embeddings=256,
                mamba_d_ssm=128,
                mamba_n_heads=8,
                mamba_d_head=16,
                mamba_n_groups=1,
                mamba_d_state=16,
                mamba_d_conv=4,
                mamba_expand=2,
                mamba_chunk_size=32,
                rope_parameters=_rope(),
                embedding_multiplier=1.5,
                lm_head_multiplier=0.8,
                mlp_multipliers=[1.1, 0.9],
                key_multiplier=0.8,
                attention_in_multiplier=1.1,
                attention_out_multiplier=0.9,
                ssm_in_multiplier=1.2,
                ssm_out_multiplier=0.9,
                ssm_multipliers=[1.0, 1.1, 0.9, 1.2, 0.8],
                # llama.cpp's converter folds embedding_multiplier into token_embd and
                # lm_head_multiplier into output: a tied head would come out wrong there
                tie_word_embeddings=False,
            ),
            "parallel attention + mamba2 per layer; every muP multiplier != 1; untied head "
            "(the GGUF converter folds the multipliers into the weights)",
        ),
        "granitemoehybrid": (
            "GraniteMoeHybridConfig",
            "granitemoehybrid",
            _common(
                intermediate_size=32,
                shared_intermediate_size=64,
                num_local_experts=4,
                num_experts_per_tok=2,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=256,
                layer_types=["mamba", "attention", "mamba"],
                position_embedding_type="rope",
                rope_parameters=_rope(),
                mamba_n_heads=8,
                mamba_d_head=16,
                mamba_n_groups=1,
                mamba_d_state=16,
                mamba_d_conv=4,
                mamba_expand=2,
                mamba_chunk_size=32,
                embedding_multiplier=2.0,
                logits_scaling=1.5,
                residual_multiplier=0.5,
                attention_multiplier=0.2,
            ),
            "mamba2 + attention layers, MoE 4 experts top-2 + shared MLP (MoE: other issue); "
            "granite multipliers != 1",
        ),
        "jamba": (
            "JambaConfig",
            "jamba",
            _common(
                intermediate_size=96,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=256,
                num_experts=4,
                num_experts_per_tok=2,
                expert_layer_period=2,
                expert_layer_offset=1,
                attn_layer_period=2,
                attn_layer_offset=1,
                use_mamba_kernels=False,
                mamba_d_state=16,
                mamba_d_conv=4,
                mamba_expand=2,
            ),
            "mamba layers 0,2 + attention 1,3; MoE (4 experts top-2) on layers 1,3 "
            "(MoE: other issue)",
        ),
    }
    return specs[name]


GROUPS = {
    "a": ["llama", "qwen2", "qwen3", "gemma3"],
    "b": ["lfm2"],
    "d": [
        "mamba2",
        "mamba2_g2",
        "mamba",
        "qwen3_next",
        "qwen3_next_dense",
        "qwen3_5",
        "qwen3_5_moe",
    ],
    "e": ["falcon_h1", "granitemoehybrid", "jamba"],
    # the GGUF F32 fixtures (SSM / linear-attention families llama.cpp converts)
    "ssm_gguf": [
        "mamba2",
        "mamba2_g2",
        "mamba",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "falcon_h1",
        "granitemoehybrid",
        "jamba",
        # made by scripts/make_ssm_dense_fixtures.py
        "granitemoehybrid_dense",
        "jamba_dense",
    ],
}
ALL_MODELS = [m for g in "abde" for m in GROUPS[g]]


def build(name: str, train: bool = True) -> tuple[Any, dict[str, Any], str]:
    """The seeded, conditioned (``CONDITIONED``), trained (``train``: see the module doc),
    noised (every 1-D parameter and A_log), float32 eval-mode model;
    ``model.fixture_noise`` holds the noise added to each parameter and
    ``model.fixture_training`` the training record (None when not trained)."""
    import importlib

    import torch
    from transformers import AutoModelForCausalLM

    cls_name, module, kwargs, note = spec(name)
    cfg_cls = getattr(importlib.import_module(f"transformers.models.{module}"), cls_name)
    cfg = cfg_cls(**kwargs)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = np.asarray(make_tokenizer().encode(TEXT).ids, dtype=np.int64)
    record = None
    if name in CONDITIONED:
        with torch.no_grad():
            condition(model, cfg, SEED + 2)
    if train:
        record = {"train": fit(model, ids, SEED + 3, TRAIN_STEPS)}
    noise = {}
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters()):
            # Mamba-1's A_log is [d_inner, d_state] with identical rows: noise it too
            if p.ndim == 1 or pname.endswith("A_log"):
                scale = A_LOG_NOISE.get(name, NOISE) if pname.endswith("A_log") else NOISE
                n = scale * torch.randn(p.shape, generator=gen)
                p.add_(n)
                noise[pname] = n
    if train:
        for pname, p in model.named_parameters():
            p.requires_grad_(pname not in noise)
        record["retrain_noised_frozen"] = fit(model, ids, SEED + 4, RETRAIN_STEPS)
        for p in model.parameters():
            p.requires_grad_(True)
    model.fixture_noise = noise
    model.fixture_training = record
    return model, kwargs, note


def _logits(out: Any) -> np.ndarray:
    return out.logits[0].detach().float().numpy().astype(np.float32)


def _cache_of(out: Any) -> Any:
    for attr in ("past_key_values", "cache", "cache_params"):
        c = getattr(out, attr, None)
        if c is not None:
            return c
    raise RuntimeError("the model returned no cache object")


def run_oracle(model: Any, ids24: np.ndarray, ids80: np.ndarray) -> dict[str, np.ndarray]:
    """logits24, prefill16_decode8, logits80."""
    import torch

    with torch.no_grad():
        t24 = torch.from_numpy(ids24)[None]
        logits24 = _logits(model(t24, use_cache=False))
        logits80 = _logits(model(torch.from_numpy(ids80)[None], use_cache=False))
        out = model(t24[:, :16], use_cache=True)
        rows = [_logits(out)]
        cache = _cache_of(out)
        for t in range(16, 24):
            out = model(
                t24[:, t : t + 1],
                cache=cache,
                use_cache=True,
                cache_position=torch.tensor([t]),
            )
            cache = _cache_of(out)
            rows.append(_logits(out))
    return {
        "ids24": ids24,
        "logits24": logits24,
        "prefill16_decode8": np.concatenate(rows, axis=0),
        "ids80": ids80,
        "logits80": logits80,
    }


def make_hf(name: str, tok: Any) -> dict[str, Any]:
    """Build, save and run one tiny model; returns a summary."""
    import torch
    import transformers

    model, kwargs, note = build(name)
    out = HF_DIR / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(str(out), safe_serialization=True)
    save_tokenizer(tok, out)
    ids24, ids80 = fixed_ids(tok)
    res = run_oracle(model, ids24, ids80)
    l24, pd = res["logits24"], res["prefill16_decode8"]
    for k in ("logits24", "prefill16_decode8", "logits80"):
        assert np.isfinite(res[k]).all(), (name, k)
    scale = float(np.abs(l24).max())
    decode_err = float(np.abs(pd - l24).max())
    chunk_err = float(np.abs(res["logits80"][:24] - l24).max())
    spread = float(l24.std(axis=-1).min())
    assert spread > 1e-2, f"{name}: logits nearly constant (min row std {spread})"
    assert decode_err <= 1e-4 * scale, f"{name}: prefill+decode differs from full by {decode_err}"
    np.savez(out / "expected.npz", **res)
    # every noised parameter must matter: dropping its noise moves the logits by far more
    # than the tests' tolerances (1e-4 of max|logit|; 1e-3 for F16 GGUFs)
    effects = drop_effects(model, model.fixture_noise, ids24)
    weakest = min(effects, key=effects.__getitem__)
    assert effects[weakest] > DROP_MIN, f"{name}: dropping {weakest} moves {effects[weakest]}"
    st_name = _saved_name(out, weakest)
    config = json.loads((out / "config.json").read_text())
    n_params = sum(p.numel() for p in model.parameters())
    meta = {
        "name": name,
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures"),
        "config_class": spec(name)[0],
        "config_kwargs": kwargs,
        "config": config,
        "note": note,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seed": SEED,
        "noise_on_1d_params": NOISE,
        "noise_on_A_log": A_LOG_NOISE.get(name, NOISE),
        "training": model.fixture_training,
        "n_params": n_params,
        "max_abs_logit24": scale,
        "max_err_prefill16_decode8_vs_logits24": decode_err,
        "max_err_logits80_first24_vs_logits24": chunk_err,
        "min_row_std_logits24": spread,
        "conditioning": (
            {"gdn_a_range": list(GDN_A_RANGE), "gdn_qk": GDN_QK} if name in CONDITIONED else None
        ),
        # max|logits24 change| / max|logits24| when one parameter's noise is removed
        "drop_effect_min": effects[weakest],
        "drop_effect_median": float(np.median(list(effects.values()))),
        # the least sensitive one, with its noise (tests/models/test_gguf_accuracy.py removes it)
        "weakest_param": {
            "name": st_name,
            "effect": effects[weakest],
            "noise": model.fixture_noise[weakest].flatten().tolist(),
        },
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {
        "name": name,
        "params": n_params,
        "max|logit|": scale,
        "decode_err": decode_err,
        "chunk_err": chunk_err,
    }


# --------------------------------------------------------------------------- gguf

_CONVERT_SHIM = """
import sys
conv = sys.argv[1]
sys.path[:0] = [conv.rsplit('/', 1)[0] + '/gguf-py', conv.rsplit('/', 1)[0]]
import conversion.base as base
# our tokenizer uses the GPT-2 pre-tokenizer regex (tokenizers' ByteLevel(use_regex=True))
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'gpt-2'
# Jamba's converter wants a sentencepiece / Llama-HF vocabulary; ours is a byte-level BPE
# in tokenizer.json, which the generic GPT-2 path writes (the same ids as the HF fixture)
import conversion.jamba as jamba
jamba.JambaModel.set_vocab = lambda self: self._set_vocab_gpt2()
# GraniteMoeHybrid: transformers 5 saves layer_types as 'linear_attention' / 'full_attention',
# the converter looks for 'attention' only (it would write every layer as Mamba: head_count_kv
# all 0, the attention layer's Q/K rows not permuted for llama.cpp's normal RoPE); and it
# writes rope.scaling.finetuned = false (no RoPE) for every non-Bamba hybrid, as the released
# Granite 4 checkpoints use position_embedding_type 'nope' - ours uses 'rope'
import conversion.granite as granite
_GH = granite.GraniteHybridModel
_attn_layers, _set_params = _GH.get_attn_layers, _GH.set_gguf_parameters
def _granite_attn_layers(self):
    types = self.hparams.get('layer_types')
    if types:
        return [i for i, t in enumerate(types) if t in ('attention', 'full_attention')]
    return _attn_layers(self)
def _granite_params(self):
    _set_params(self)
    if self.hparams.get('position_embedding_type') == 'rope':
        self.gguf_writer.add_rope_scaling_finetuned(True)
_GH.get_attn_layers = _granite_attn_layers
_GH.set_gguf_parameters = _granite_params
import runpy
sys.argv = [conv] + sys.argv[2:]
runpy.run_path(conv, run_name='__main__')
"""


def make_gguf(names: list[str], converter: Path, ftypes: list[str]) -> dict[str, str]:
    """Convert each hf/<name> to GGUF in each of ``ftypes``; returns file stem -> status."""
    GGUF_DIR.mkdir(parents=True, exist_ok=True)
    status = {}
    for name in names:
        src = HF_DIR / name
        for ftype in ftypes:
            dst = GGUF_DIR / f"{name}-{ftype}.gguf"
            cmd = [
                sys.executable,
                "-c",
                _CONVERT_SHIM,
                str(converter),
                str(src),
                "--outfile",
                str(dst),
                "--outtype",
                ftype,
            ]
            if name.startswith(("qwen3_next", "qwen3_5")):
                cmd.append("--no-mtp")  # the tiny models have no multi-token-prediction layers
            env = dict(os.environ, NO_LOCAL_GGUF="1", HF_HUB_OFFLINE="1")
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                err = (r.stderr.strip().splitlines() or ["?"])[-1]
                status[f"{name}-{ftype}"] = f"FAILED: {err}"
                dst.unlink(missing_ok=True)
                break
            status[f"{name}-{ftype}"] = f"ok {dst.stat().st_size} B"
    return status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", nargs="+", default=["hf", "rnn"], choices=["hf", "rnn", "gguf"])
    ap.add_argument(
        "--models", nargs="+", default=ALL_MODELS, help="fixture names, or groups a b d e"
    )
    ap.add_argument("--converter", type=Path, help="llama.cpp convert_hf_to_gguf.py")
    ap.add_argument(
        "--gguf-types",
        nargs="+",
        default=["q8_0"],
        choices=["f32", "f16", "q8_0"],
        help="GGUF types to write (committed: see the module doc)",
    )
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names: list[str] = []
    for m in args.models:
        names.extend(GROUPS.get(m, [m]))
    if "hf" in args.what:
        import torch

        torch.set_num_threads(2)
        tok = make_tokenizer()
        for name in names:
            print(make_hf(name, tok), flush=True)
    if "rnn" in args.what:
        from make_rnn_fixtures import make_rnn

        print(f"rnn: {len(make_rnn())} files")
    if "gguf" in args.what:
        if args.converter is None:
            ap.error("--what gguf needs --converter PATH/convert_hf_to_gguf.py")
        for k, v in make_gguf(names, args.converter.resolve(), args.gguf_types).items():
            print(k, v)


if __name__ == "__main__":
    main()
