"""Generate tests/fixtures/optim/trajectories.npz with torch.optim (run by hand
with the peer venv: ``/work/peer-venv/bin/python scripts/make_optim_fixture.py``).

A small MLP regression ``mean((tanh(x @ w1 + b1) @ w2 - y)²)`` trained for
a few steps by each optimizer configuration; the fixture keeps the data, the
initial parameters and, per configuration, the loss and every parameter
after each step (float32, as torch computes them). CI never imports torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

STEPS = 6
CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1), None),
    "sgd_momentum": (
        torch.optim.SGD,
        dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
        None,
    ),  # fmt: skip
    "sgd_nesterov": (
        torch.optim.SGD,
        dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        None,
    ),  # fmt: skip
    "adam": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.01), None),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1), None),
    "adamw_clip": (torch.optim.AdamW, dict(lr=0.02, weight_decay=0.05), 0.3),
}


def main() -> None:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    init = {
        "w1": (rng.standard_normal((3, 4)) * 0.7).astype(np.float32),
        "b1": (rng.standard_normal(4) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((4, 2)) * 0.7).astype(np.float32),
    }
    out: dict[str, np.ndarray] = {"x": x, "y": y}
    out.update({f"init.{k}": v for k, v in init.items()})
    for name, (cls, kw, clip) in CONFIGS.items():
        ps = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
        opt = cls(list(ps.values()), **kw)
        losses = []
        traj: dict[str, list[np.ndarray]] = {k: [] for k in ps}
        for _ in range(STEPS):
            opt.zero_grad()
            h = torch.tanh(torch.from_numpy(x) @ ps["w1"] + ps["b1"])
            loss = ((h @ ps["w2"] - torch.from_numpy(y)) ** 2).mean()
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(list(ps.values()), clip)
            opt.step()
            losses.append(loss.item())
            for k, p in ps.items():
                traj[k].append(p.detach().numpy().copy())
        out[f"{name}.loss"] = np.array(losses, np.float32)
        for k, v in traj.items():
            out[f"{name}.{k}"] = np.stack(v)
    dst = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "optim"
    dst.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(dst / "trajectories.npz", **out)
    print("wrote", dst / "trajectories.npz", f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
