"""Regenerate the tiny mixture-of-experts oracle fixtures (mixtral, qwen2_moe, qwen3_moe, olmoe).

Same recipe and layout as ``scripts/make_seq_fixtures.py`` (whose helpers this script
imports): transformers' own config classes, hidden 64, vocab 512, 2 layers, 4 attention
heads / 2 KV heads, float32, eager attention, seed 1234, ``0.1·randn`` on every 1-D
parameter, init range 0.1 and **not** trained (``build(name, train=False)``: these fixtures
predate the trained ones and keep their numbers); here with 4 experts, top-2, expert FFN 32
on every layer:

* ``mixtral``: softmax router, top-2 renormalised (always, as transformers does);
* ``qwen2_moe``: q/k/v biases, softmax top-2 **not** renormalised
  (``norm_topk_prob=False``) plus a shared expert (FFN 48) scaled by
  ``sigmoid(shared_expert_gate(x))``;
* ``qwen3_moe``: per-head q/k RMSNorm, softmax top-2 renormalised (``norm_topk_prob=True``);
* ``olmoe``: q/k RMSNorm over the whole projection width, softmax top-2 not renormalised.

Routing must not be degenerate. With random weights the residual stream has a large
component shared by every token, so one router tends to send nearly all tokens to one
expert (measured: layer 1 of mixtral picked expert 0 for 78 of 80 tokens and never expert
1). So after the seeded init each router weight ``W`` loses its projection on the mean
of its own inputs over ``ids80`` (``W -= (W m) mᵀ / |m|²``, layer by layer): the routing
then depends on what differs between tokens. A forward hook on every router records which experts
each of the 80 tokens picks; the script asserts that every expert is chosen by some
token in every layer and that tokens pick different top-2 sets, and writes the counts
into ``meta.json`` (``routing``).

    /work/peer-venv/bin/python scripts/make_moe_fixtures.py [--models mixtral ...]
    /work/peer-venv/bin/python scripts/make_moe_fixtures.py --what gguf \\
        --converter $SDIST/vendor/llama.cpp/convert_hf_to_gguf.py

(``--what gguf`` writes ``tests/fixtures/gguf/<name>-q8_0.gguf``.)

``gemma3n`` (``--models gemma3n``) is Gemma 3n's text decoder (``Gemma3nTextConfig`` →
``Gemma3nForCausalLM``), no experts but the other sparse machinery of issue 16: 6 layers
``S S F S S F`` (sliding window 8), the last 3 reusing the KV of layers 1 (sliding) / 2
(full) — the order llama.cpp's hard-coded reuse rule (``n_layer_kv_from_start − 2 / − 1``)
agrees with —, per-layer FFN widths ``96 64 96 64 96 64``, activation sparsity
``0.95 0.8 0 …`` (the gaussian top-k on layers 0-1), AltUp with 4 streams, Laurel rank 8,
per-layer inputs of 16, final logit softcapping 4 (the random logits reach ~3, so the tanh
bends them). The AltUp router / coefficient matrices are scaled after the seeded init
(router ×10, prediction and correction coefficients ×2): with the plain init the router's
``1/hidden`` input scale leaves every mixing coefficient below 1e-2 and a wrong AltUp would
move the logits by only ~1e-3. Its GGUFs are written in F32 and Q8_0
(``--what gguf --models gemma3n``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_seq_fixtures as seq  # noqa: E402

MOE_MODELS = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"]
_S, _F = "sliding_attention", "full_attention"
#: Gemma 3n text decoder (see the module doc)
GEMMA3N = (
    "Gemma3nTextConfig",
    "gemma3n",
    seq._attn(
        num_hidden_layers=6,
        layer_types=[_S, _S, _F, _S, _S, _F],
        sliding_window=8,
        intermediate_size=[96, 64, 96, 64, 96, 64],
        num_kv_shared_layers=3,
        vocab_size_per_layer_input=512,
        hidden_size_per_layer_input=16,
        laurel_rank=8,
        altup_num_inputs=4,
        activation_sparsity_pattern=[0.95, 0.8, 0.0, 0.0, 0.0, 0.0],
        final_logit_softcapping=4.0,
        rope_parameters={
            _F: {"rope_type": "default", "rope_theta": 1000000.0},
            _S: {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    "Gemma3nForCausalLM: AltUp 4 streams (router x10, coefs x2 after init), Laurel rank 8, "
    "per-layer inputs 16, activation sparsity 0.95/0.8 on layers 0-1, layers 3-5 reuse the "
    "KV of layers 1 (sliding) / 2 (full), per-layer FFN widths, softcap 4",
)
#: scale of the AltUp matrices after the seeded init (see the module doc)
GEMMA3N_ALTUP_SCALE = {"modality_router": 10.0, "prediction_coefs": 2.0, "correction_coefs": 2.0}
ALL = [*MOE_MODELS, "gemma3n"]
_EXPERTS = dict(num_experts_per_tok=2, num_hidden_layers=2)


def _init_01(s: tuple[str, str, dict[str, Any], str]) -> tuple[str, str, dict[str, Any], str]:
    return s[0], s[1], {**s[2], "initializer_range": 0.1}, s[3]


def moe_spec(name: str) -> tuple[str, str, dict[str, Any], str]:
    """(config class, transformers module, kwargs, note) of a MoE fixture."""
    specs: dict[str, tuple[str, str, dict[str, Any], str]] = {
        "mixtral": (
            "MixtralConfig",
            "mixtral",
            seq._attn(num_local_experts=4, intermediate_size=32, **_EXPERTS),
            "4 experts top-2 (renormalised), expert ffn 32",
        ),
        "qwen2_moe": (
            "Qwen2MoeConfig",
            "qwen2_moe",
            seq._attn(
                num_experts=4,
                moe_intermediate_size=32,
                shared_expert_intermediate_size=48,
                norm_topk_prob=False,
                **_EXPERTS,
            ),
            "q/k/v biases; 4 experts top-2 (not renormalised), expert ffn 32, "
            "shared expert 48 with sigmoid gate",
        ),
        "qwen3_moe": (
            "Qwen3MoeConfig",
            "qwen3_moe",
            seq._attn(num_experts=4, moe_intermediate_size=32, norm_topk_prob=True, **_EXPERTS),
            "q_norm / k_norm per head; 4 experts top-2 (renormalised), expert ffn 32",
        ),
        "olmoe": (
            "OlmoeConfig",
            "olmoe",
            seq._attn(num_experts=4, intermediate_size=32, norm_topk_prob=False, **_EXPERTS),
            "q_norm / k_norm over the whole q / k width; 4 experts top-2 (not renormalised)",
        ),
    }
    # these fixtures are random, not trained (``balanced_build``): the 0.1 init they were made with
    if name == "gemma3n":
        return _init_01(GEMMA3N)
    if name in specs:
        return _init_01(specs[name])
    return _seq_spec(name)


_seq_spec = seq.spec
_seq_build = seq.build


def _routers(model: Any) -> list[Any]:
    return [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]


def balanced_build(name: str) -> tuple[Any, dict[str, Any], str]:
    """``make_seq_fixtures.build``, then each router weight made orthogonal to the
    mean of its inputs over ``ids80`` (see the module doc)."""
    import torch

    model, kwargs, note = _seq_build(name, train=False)
    if name == "gemma3n":
        with torch.no_grad():
            for pname, p in model.named_parameters():
                for key, scale in GEMMA3N_ALTUP_SCALE.items():
                    if f"altup.{key}." in pname:
                        p.mul_(scale)
        return model, kwargs, note
    if name not in MOE_MODELS:
        return model, kwargs, note
    _, ids80 = seq.fixed_ids(seq.make_tokenizer())
    for router in _routers(model):
        seen: list[Any] = []

        def grab(_m: Any, inp: Any, _o: Any, seen: list[Any] = seen) -> None:
            seen.append(inp[0].detach())

        hook = router.register_forward_hook(grab)
        with torch.no_grad():
            model(torch.from_numpy(ids80)[None], use_cache=False)
        hook.remove()
        mean = seen[0].reshape(-1, seen[0].shape[-1]).double().mean(0)
        w = router.weight.data.double()
        w -= torch.outer(w @ mean, mean) / (mean @ mean)
        router.weight.data.copy_(w.float())
    return model, kwargs, note


def routing(model: Any, ids: np.ndarray) -> dict[str, Any]:
    """Per layer: how many of the tokens pick each expert, and how many distinct top-k sets."""
    import torch

    picks: list[np.ndarray] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: picks.append(out[2].numpy().copy()))
        for m in _routers(model)
    ]
    try:
        with torch.no_grad():
            model(torch.from_numpy(ids)[None], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    n_exp = model.config.num_experts
    out = []
    for layer, idx in enumerate(picks):
        counts = np.bincount(idx.reshape(-1), minlength=n_exp).tolist()
        sets = len({tuple(sorted(r)) for r in idx.tolist()})
        assert min(counts) > 0 and sets > 1, f"degenerate routing in layer {layer}: {counts}"
        out.append({"layer": layer, "tokens": int(idx.shape[0]), "expert_counts": counts,
                    "distinct_topk_sets": sets})  # fmt: skip
    return {"layers": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", nargs="+", default=["hf"], choices=["hf", "gguf"])
    ap.add_argument("--models", nargs="+", default=MOE_MODELS, choices=ALL)
    ap.add_argument("--converter", type=Path, help="llama.cpp convert_hf_to_gguf.py")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    seq.build = balanced_build
    seq.spec = moe_spec  # build() / make_hf() look the spec up through the module
    if "hf" in args.what:
        import torch

        torch.set_num_threads(2)
        tok = seq.make_tokenizer()
        _, ids80 = seq.fixed_ids(tok)
        for name in args.models:
            print(seq.make_hf(name, tok), flush=True)
            model, _, _ = seq.build(name)
            meta_path = seq.HF_DIR / name / "meta.json"
            meta = json.loads(meta_path.read_text())
            if name not in MOE_MODELS:
                continue
            meta["routing"] = routing(model, ids80)
            meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            print(name, meta["routing"], flush=True)
    if "gguf" in args.what:
        if args.converter is None:
            ap.error("--what gguf needs --converter PATH/convert_hf_to_gguf.py")
        for name in args.models:
            types = ["f32", "q8_0"] if name == "gemma3n" else ["q8_0"]
            for k, v in seq.make_gguf([name], args.converter.resolve(), types).items():
                print(k, v)


if __name__ == "__main__":
    main()
