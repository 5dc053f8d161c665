"""The ``rlx`` command line: ``rlx env`` lists the environment variables,
``rlx demo`` builds and prints a small transformer graph."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlx import _rlx
from rlx.graph import Graph


def _cmd_env(_args: argparse.Namespace) -> int:
    for name, default, meaning in _rlx.env_vars():
        print(f"{name:28} default={default!r:14} {meaning}")
    return 0


def build_demo_graph(
    vocab: int = 256,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    layers: int = 1,
) -> Graph:
    """A small llama-style decoder over a symbolic ``seq``: embedding gather,
    per layer RMSNorm → q/k/v matmuls → RoPE → causal GQA attention → output
    projection + residual, RMSNorm → SwiGLU MLP + residual; final norm and
    logits ``[1, seq, vocab]``."""
    head_dim = hidden // heads
    g = Graph("demo")
    tokens = g.input("tokens", [1, "seq"], "i32")
    cos = g.input("rope_cos", ["seq", head_dim // 2])
    sin = g.input("rope_sin", ["seq", head_dim // 2])
    h = g.gather(g.param("tok_embd", [vocab, hidden]), tokens, name="embed")
    for i in range(layers):
        p = f"blk.{i}."
        x = g.rms_norm(h, g.param(p + "attn_norm", [hidden]), name=p + "attn_in")
        q = g.matmul(x, g.param(p + "attn_q", [hidden, heads * head_dim]), name=p + "q")
        k = g.matmul(x, g.param(p + "attn_k", [hidden, kv_heads * head_dim]), name=p + "k")
        v = g.matmul(x, g.param(p + "attn_v", [hidden, kv_heads * head_dim]), name=p + "v")
        q = g.rope(q, cos, sin, head_dim=head_dim, name=p + "q_rope")
        k = g.rope(k, cos, sin, head_dim=head_dim, name=p + "k_rope")
        a = g.attention(q, k, v, heads=heads, kv_heads=kv_heads, name=p + "attn")
        h = g.add(h, a @ g.param(p + "attn_output", [heads * head_dim, hidden]), name=p + "res1")
        x = g.rms_norm(h, g.param(p + "ffn_norm", [hidden]), name=p + "ffn_in")
        gate_up = g.matmul(x, g.param(p + "ffn_gate_up", [hidden, 2 * ffn]), name=p + "gate_up")
        act = g.swiglu(gate_up, gate_first=True, name=p + "swiglu")
        h = g.add(h, act @ g.param(p + "ffn_down", [ffn, hidden]), name=p + "res2")
    x = g.rms_norm(h, g.param("output_norm", [hidden]), name="final_norm")
    logits = g.matmul(x, g.param("output", [hidden, vocab]), name="logits")
    g.outputs(logits)
    return g


def _cmd_demo(args: argparse.Namespace) -> int:
    g = build_demo_graph(layers=args.layers)
    print(g)
    g.verify()
    for out in g.outputs():
        dims = ", ".join(str(d) for d in out.shape)
        print(f"output {out.name}: {out.dtype}[{dims}]")
    return _run_demo(g, seq=args.seq)


def _run_demo(g: Any, seq: int) -> int:
    """Compile the demo graph for ``seq`` tokens on the host and the numpy
    reference, run both on the same random weights and compare."""
    import time

    import numpy as np

    import rlx

    results = {}
    for device in ("host", "reference"):
        exe = rlx.compile(g, device=device, dims={"seq": seq})
        rng = np.random.default_rng(0)  # the same weights and inputs on both devices
        for name in sorted(exe.params):
            slot = exe.params[name]
            scale = 1.0 if name.endswith("norm") else 0.08
            exe.set_param(name, (rng.standard_normal(slot.shape) * scale).astype(slot.np_dtype))
        feeds = {}
        for name in sorted(exe.inputs):
            slot = exe.inputs[name]
            if slot.dtype.startswith("i"):
                feeds[name] = np.arange(int(np.prod(slot.shape))).reshape(slot.shape) % 7
            else:
                feeds[name] = rng.standard_normal(slot.shape).astype(slot.np_dtype)
        t0 = time.perf_counter()
        out = exe.run(**feeds)
        dt = time.perf_counter() - t0
        results[device] = next(iter(out.values()))
        s = exe.stats
        print(
            f"{device:9} {s['thunks']} thunks ({s['native_thunks']} native), arena "
            f"{s['arena_bytes']} B vs naive {s['naive_bytes']} B, run {dt * 1e3:.2f} ms"
        )
    diff = float(np.max(np.abs(results["host"] - results["reference"])))
    print(f"max |host - reference| over the logits: {diff:.3g}")
    return 0 if diff < 1e-3 else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlx`` script."""
    p = argparse.ArgumentParser(prog="rlx", description="rlx ML compiler and runtime")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env", help="list the environment variables rlx reads").set_defaults(
        fn=_cmd_env
    )
    demo = sub.add_parser("demo", help="build and print a small transformer-block graph")
    demo.add_argument("--layers", type=int, default=1, help="decoder layers (default 1)")
    demo.add_argument("--seq", type=int, default=8, help="tokens to run (default 8)")
    demo.set_defaults(fn=_cmd_demo)
    args = p.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
