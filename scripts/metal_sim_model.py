"""A real packaged model on ``device="metal-sim"`` against the host device:
the prompt's prefill logits and one decode step's logits, with the Metal plan
figures of both graphs. The host reference runs with its int8-activation
GEMV paths off (``rlx.set_int8_activations(False)``), so both sides dot f32
activations with the decoded GGUF weights.

    python scripts/metal_sim_model.py [--model smollm2] [--prompt TEXT]

msl-sim runs every kernel on the CPU (one dispatch after another), so this
takes minutes for SmolLM2-135M; the CI suite runs tiny random decoders the
same way (tests/models/test_metal_sim_decoder.py).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import rlx


def _err(got: np.ndarray, want: np.ndarray) -> str:
    scale = float(np.max(np.abs(want)))
    diff = float(np.max(np.abs(got - want)))
    top = int(np.sum(np.argmax(got, axis=-1) == np.argmax(want, axis=-1)))
    return (
        f"max |Δ| {diff:.3g} = {diff / scale:.2e} · max |logit| ({scale:.3g}), "
        f"top-1 equal on {top}/{got.reshape(-1, got.shape[-1]).shape[0]} rows"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompt", default="The capital of France is")
    args = ap.parse_args()
    rlx.set_int8_activations(False)
    host = rlx.load(args.model, inplace=True)
    sim = rlx.load(args.model, device="metal-sim", inplace=True)
    ids = host.tokenizer.encode(args.prompt)
    print(f"{args.model}: prompt of {len(ids)} tokens")
    for n_new, decode in ((len(ids), False), (1, True)):
        st = sim.compiled(n_new, decode)[2].stats
        print(
            f"  {'decode' if decode else 'prefill'} plan: {st['metal_dispatches']} dispatches, "
            f"{st['metal_barriers']} barriers, {st['metal_host']} host commands "
            f"{st['metal_host_by_thunk'] or ''}"
        )
    t = time.perf_counter()
    want = np.asarray(host.logits(ids))
    t_host = time.perf_counter() - t
    t = time.perf_counter()
    got = np.asarray(sim.logits(ids))
    t_sim = time.perf_counter() - t
    print(f"  prefill: {_err(got, want)}; host {t_host:.2f} s, metal-sim {t_sim:.0f} s")
    nxt = [int(np.argmax(want[-1]))]
    t = time.perf_counter()
    want = np.asarray(host.next_logits(nxt))
    got = np.asarray(sim.next_logits(nxt))
    print(f"  decode step: {_err(got, want)}; metal-sim {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
