"""The conditioned init of the gated-delta-net oracle fixtures, the brief training of
every oracle fixture (``fit``) and the dropped-parameter check of every fixture (used by
scripts/make_seq_fixtures.py; torch is imported lazily, run with the peer python)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: Conditioning of the gated-delta-net fixtures' random init (see ``condition``).
GDN_A_RANGE = (0.02, 0.5)
GDN_QK = 0.8
#: the fixtures ``condition`` applies to
CONDITIONED = ("qwen3_next", "qwen3_next_dense", "qwen3_5", "qwen3_5_moe")


def condition(model: Any, cfg: Any, seed: int) -> None:
    """Make a gated-delta-net model well conditioned (before the 1-D noise is added).

    With transformers' own init these models amplify weight rounding far beyond the
    other families (F16 weights: 1.7e-2 to 0.18 of max|logit| off the F32 model, against
    1e-3 for llama; Q8_0: 79-90% greedy agreement). Measured causes (per-head outputs and
    per-layer relative errors, F32 vs rounded weights) and what is done here:

    * ``A_log = log U(0.01, 16)`` makes most heads forget their state at every token
      (decay exp(-A softplus(a + dt_bias)) down to 1e-9), so ``o_t = S q_t`` is a single
      ``beta v (k.q) / 4`` whose size follows a dot product of two random unit 16-d
      vectors; the gated RMSNorm then rescales that near-zero output to unit size (per-head
      output rms down to 9e-5 against a median of 4e-3; relative error of the normed output
      up to 1.4 at layer 2 with Q8_0 weights). Here A ~ U(0.02, 0.5) (memory of 2-50
      tokens: the state carried across the 64-token chunk boundary matters too), and the q
      rows of the input projection and their conv taps are ``0.8 k + 0.6 q`` (queries
      correlated with keys, as trained models retrieve what they stored), so the output no
      longer hinges on a near-zero dot product.

    Still needed after the training (``fit``): without it a trained qwen3_5 meets the
    GGUF targets too (F16 3.3e-4 of max|logit|, Q8_0 greedy agreement 1.0, torch
    simulation of the rounding), but its heads still forget their state at once, so the
    noise of layer 1's ``dt_bias`` moves the logits by only 7e-5 of max|logit| (below
    ``DROP_MIN`` and the 1e-4 tolerance: a loader dropping it would pass); with it the
    least sensitive parameter moves them by 2e-3.

    MoE routing is left as it is: a router near-tie flipped by rounding swaps in another
    expert (0.05-0.18 of max|logit| at one token on qwen3_next / qwen3_5_moe with F16
    weights); correlating the experts did not make that small.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    mix = (1 - GDN_QK**2) ** 0.5
    for mname, mod in model.named_modules():
        if mname.endswith("linear_attn"):
            lo, hi = GDN_A_RANGE
            mod.A_log.copy_(torch.empty(mod.A_log.shape).uniform_(lo, hi, generator=gen).log())
            kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
            dk = cfg.linear_key_head_dim
            if hasattr(mod, "in_proj_qkv"):  # Qwen3.5: rows [q | k | v]
                w = mod.in_proj_qkv.weight
                w[:kd] = GDN_QK * w[kd : 2 * kd] + mix * w[:kd]
            else:  # Qwen3-Next: per key head [q, k, v, z]
                w = mod.in_proj_qkvz.weight.view(cfg.linear_num_key_heads, -1, cfg.hidden_size)
                w[:, :dk] = GDN_QK * w[:, dk : 2 * dk] + mix * w[:, :dk]
            c = mod.conv1d.weight  # channels [q | k | v]
            c[:kd] = GDN_QK * c[kd : 2 * kd] + mix * c[:kd]


def drop_effects(model: Any, noise: dict[str, Any], ids: np.ndarray) -> dict[str, float]:
    """For every noised parameter: max|logits(ids) - logits with that parameter's noise
    removed| / max|logits| (how strongly a loader that dropped it would be caught)."""
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        t = torch.from_numpy(ids)[None]
        ref = model(t, use_cache=False).logits[0].numpy()
        scale = float(np.abs(ref).max())
        out = {}
        for pname, n in noise.items():
            params[pname].sub_(n)
            got = model(t, use_cache=False).logits[0].numpy()
            out[pname] = float(np.abs(got - ref).max()) / scale
            params[pname].add_(n)
    return out


#: the least any noised parameter may move the logits when its noise is dropped (twice
#: the tolerance of the F32 / HF-directory tests)
DROP_MIN = 2e-4


def _saved_name(out: Path, pname: str) -> str:
    """The safetensors name of parameter ``pname`` (save_pretrained may rename)."""
    raw = (out / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    if pname in header:
        return pname
    hits = [k for k in header if k.endswith(pname.split(".", 1)[1])]
    assert len(hits) == 1, (pname, hits)
    return hits[0]


#: Training of the oracle fixtures (``fit``): AdamW steps before the 1-D noise, steps
#: after it with the noised parameters frozen, peak learning rate, weight decay.
TRAIN_STEPS = 200
RETRAIN_STEPS = 60
TRAIN_LR = 3e-3
TRAIN_WD = 0.01


def fit(model: Any, ids: np.ndarray, seed: int, steps: int) -> dict[str, Any]:
    """Train ``model`` in place on the token sequence ``ids`` (next-token cross entropy,
    the whole sequence from position 0 as one batch, AdamW with a linear warm-up and a
    cosine decay, gradient norm clipped to 1; CPU, one thread, deterministic algorithms,
    eval mode so no dropout or router jitter). Returns the loss record for meta.json."""
    import math

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fixed reduction order: the same weights on every re-run
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    t = torch.from_numpy(ids)[None]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=TRAIN_LR, betas=(0.9, 0.95), weight_decay=TRAIN_WD)
    warm = max(1, steps // 10)

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    losses: list[float] = []
    try:
        for _ in range(steps):
            logits = model(t, use_cache=False).logits[0]
            loss = torch.nn.functional.cross_entropy(logits[:-1], t[0, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            logits = model(t, use_cache=False).logits[0]
            final = float(torch.nn.functional.cross_entropy(logits[:-1], t[0, 1:]))
            acc = float((logits[:-1].argmax(-1) == t[0, 1:]).float().mean())
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
    return {
        "steps": steps,
        "optimizer": f"AdamW(betas=(0.9, 0.95), weight_decay={TRAIN_WD}), grad-norm clip 1",
        "lr": TRAIN_LR,
        "schedule": f"linear warm-up {warm} steps, cosine decay to 0",
        "tokens": int(len(ids)),
        "loss_first_step": losses[0],
        "loss_final": final,
        "train_top1_accuracy": acc,
    }
