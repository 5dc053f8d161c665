"""Train a small CNN on scikit-learn's 8×8 digits with rlx and plot its loss.

conv 3×3 (1→16) → ReLU → max-pool → conv 3×3 (16→32) → ReLU → max-pool →
linear (128→10); each training step (forward, backward through the conv /
pool backward ops, Adam update in place) is one compiled executable
(:mod:`rlx.train.digits`). Writes ``loss.png``, ``digits.safetensors``
(weights, Adam moments, step: resume with ``--resume``) and
``summary.json`` into ``--out``.

Run: ``python examples/train_digits_cnn.py [--epochs 10] [--out rlx-digits]``
(same as ``rlx train digits``). Needs scikit-learn and matplotlib.
"""

from __future__ import annotations

import argparse
import sys

from rlx.train.run import add_arguments, run

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(["digits", *sys.argv[1:]])
    if args.out == "rlx-train":
        args.out = "rlx-digits"
    run(args)
