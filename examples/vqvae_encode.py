"""VQ-VAE-style encode with rlx: a two-layer MLP encoder maps input
vectors to latents, ``vq_assign`` picks each latent's nearest codebook row
(squared L2, ties to the lowest index) and ``gather`` looks the quantised
latents up. The codebook is drawn in the graph by ``rng_normal`` (Philox,
seeded, so every device draws the same one).

Run: ``python examples/vqvae_encode.py [--device host|reference|metal-sim]``.
It checks the codes against a numpy encoder (float64 distances) and prints
the code histogram and the quantisation error.
"""

from __future__ import annotations

import argparse

import numpy as np
import rlx

N, D_IN, D_HID, D_LAT, K = 256, 16, 32, 8, 32


def build() -> rlx.Graph:
    """x [N, D_IN] -> (codes i32 [N], quantised [N, D_LAT], latents, codebook)."""
    g = rlx.Graph("vqvae_encode")
    x = g.input("x", [N, D_IN])
    w1 = g.param("w1", [D_IN, D_HID])
    w2 = g.param("w2", [D_HID, D_LAT])
    z = g.matmul(g.relu(g.matmul(x, w1)), w2, name="latents")
    codebook = g.rng_normal([K, D_LAT], scale=0.5, seed=1234, name="codebook")
    codes = g.vq_assign(z, codebook, metric="l2", name="codes")
    zq = g.gather(codebook, codes, name="quantised")
    g.outputs(codes, zq, z, codebook)
    return g


def encode(device: str = "host", seed: int = 0) -> dict[str, np.ndarray]:
    """Run the encoder on random data; returns the outputs and the inputs."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((D_IN, D_HID)) / np.sqrt(D_IN)).astype(np.float32)
    w2 = (rng.standard_normal((D_HID, D_LAT)) / np.sqrt(D_HID)).astype(np.float32)
    x = rng.standard_normal((N, D_IN)).astype(np.float32)
    exe = rlx.compile(build(), device=device)
    exe.set_param("w1", w1)
    exe.set_param("w2", w2)
    out = exe.run(x=x)
    return {**{k: np.asarray(v) for k, v in out.items()}, "x": x}


def numpy_codes(z: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """Nearest codebook row by float64 squared distance, lowest index on ties."""
    d = ((z[:, None, :].astype(np.float64) - codebook[None].astype(np.float64)) ** 2).sum(-1)
    return np.argmin(d, axis=1).astype(np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host", choices=["host", "reference", "metal-sim"])
    args = ap.parse_args()
    out = encode(args.device)
    codes, zq, z, cb = out["codes"], out["quantised"], out["latents"], out["codebook"]
    want = numpy_codes(z, cb)
    agree = float((codes == want).mean())
    print(f"device={args.device}: {N} vectors, codebook {K}x{D_LAT}")
    print(f"codes agree with numpy: {agree:.1%}")
    print(f"codes used: {len(np.unique(codes))}/{K}; histogram {np.bincount(codes, minlength=K)}")
    print(f"mean ||z - zq||^2 = {float(((z - zq) ** 2).sum(1).mean()):.4f}")
    if agree < 1.0:
        raise SystemExit("codes differ from the numpy encoder")


if __name__ == "__main__":
    main()
