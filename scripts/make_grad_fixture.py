"""Generate tests/fixtures/grad/llama_grads.npz: torch.autograd gradients of
the committed tiny Llama (tests/fixtures/hf/llama, transformers'
LlamaForCausalLM) for one causal-LM loss. Run by hand with the peer venv:
``/work/peer-venv/bin/python scripts/make_grad_fixture.py``. CI never imports
torch.

Saved: ``ids`` (int32 ``[1, s]``), ``loss`` (HF's shifted mean
cross-entropy) and ``grad.<tensor name>`` for every parameter (float32);
then ``adamw.loss`` (the loss before each of 4 torch.optim.AdamW steps,
lr 1e-2, weight decay 0.1, after clipping the global norm to 1.0) and
``adamw.<tensor name>`` after the last step for the tensors in TRACKED.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import LlamaForCausalLM

ROOT = Path(__file__).resolve().parent.parent
SEQ = 12
STEPS = 4
TRACKED = ("model.layers.0.self_attn.q_proj.weight", "model.norm.weight",
           "model.layers.1.mlp.down_proj.weight")  # fmt: skip


def main() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(ROOT / "tests" / "fixtures" / "hf" / "llama")
    model = model.float().train()
    ids = np.random.default_rng(5).integers(0, model.config.vocab_size, (1, SEQ)).astype(np.int64)
    t = torch.from_numpy(ids)
    out = model(input_ids=t, labels=t)
    out.loss.backward()
    res: dict[str, np.ndarray] = {"ids": ids.astype(np.int32), "loss": np.float32(out.loss.item())}
    for name, p in model.named_parameters():
        res[f"grad.{name}"] = p.grad.detach().numpy().astype(np.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(input_ids=t, labels=t).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    res["adamw.loss"] = np.array(losses, np.float32)
    params = dict(model.named_parameters())
    for name in TRACKED:
        res[f"adamw.{name}"] = params[name].detach().numpy().astype(np.float32)
    dst = ROOT / "tests" / "fixtures" / "grad"
    dst.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(dst / "llama_grads.npz", **res)
    print("wrote", dst / "llama_grads.npz", "loss", out.loss.item(), f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
