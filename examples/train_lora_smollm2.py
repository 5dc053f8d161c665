"""Fine-tune SmolLM2-135M (Q4_1 GGUF, weights frozen and still quantised)
with rank-8 LoRA adapters on its attention q / v projections, on a corpus
that ships with Python (the Zen of Python and standard-library module
docstrings), and plot the loss.

Each step (forward over ``--seq`` tokens, backward to the adapters, AdamW
update of adapters and moments in place) is one compiled executable
(:class:`rlx.train.LoraTrainer`). Writes ``loss.png``, ``lora.safetensors``
(adapters, AdamW moments, step: resume with ``--resume``) and
``summary.json`` into ``--out``.

Run: ``python examples/train_lora_smollm2.py [--seq 128] [--steps 40]
[--lr 1e-3] [--out rlx-lora]`` (same as ``rlx train lora smollm2``).
Needs matplotlib.
"""

from __future__ import annotations

import argparse
import sys

from rlx.train.run import add_arguments, run

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(["lora", *sys.argv[1:]])
    if args.out == "rlx-train":
        args.out = "rlx-lora"
    run(args)
