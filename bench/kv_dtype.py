"""rlx with an f16 against an f32 KV cache (``rlx.load(..., kv_dtype=)``).

Per model and round, alternating the two settings (bench/harness.py
``alternate``, each in a fresh process):

* the compare.py workload (load, first token, pp64 / pp256 / pp512, tg32 /
  tg128, one pass each): the figures and the process's peak RSS (``VmHWM``),
  so the RSS column is comparable with compare.py's;
* decode against depth: ``rlx.models.bench.depth_decode_tps`` (64 decode
  steps after a D-token prompt; the first pass compiles and warms up) per
  depth, with that process's peak RSS.

Rounds follow compare.py's rules (the 1-minute load and the other processes'
CPU are recorded, contaminated rounds discarded unless all are); figures are
medians (min–max). Prints a Markdown table; nothing is written.

    python bench/kv_dtype.py [--models smollm2 ...] [--depths 0 1024] [--rounds 3]
        [--threads 2] [--kv f16 f32 f16-cast] [--only workload|depth]

``--kv f16 f16-cast`` is the A/B of the converting KV write: the f16 cache
written by ScatterND directly against the same cache through an explicit
cast node (the graph the decoders built before).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    MAX_OTHERS,
    MODELS,
    alternate,
    model_path,
    rlx_child,
    round_notes,
    summarise,
)

# the setting's KV dtype in `kv`; "f16-cast" is the f16 cache written the way
# the decoders did before ScatterND converted on write (an explicit cast node,
# one more thunk per K and per V per layer), for an A/B of that change
_SETTING = """
import json, sys
import rlx
kv = sys.argv[2]
if kv == "f16-cast":
    from rlx.models import mixers
    def _cast_then_scatter(g, new, name, slots, c, cfg, kv_dtype):
        upd = g.cast(g.reshape(new, [new.shape[1], cfg.kv_dim]), kv_dtype)
        full = g.scatter_nd(g.state(name, [c, cfg.kv_dim], kv_dtype), slots, upd)
        return g.reshape(full, [1, c, cfg.kv_dim])
    mixers._scatter_cache = _cast_then_scatter
    kv = "f16"
"""

_WORKLOAD = (
    _SETTING
    + """
from rlx.models.bench import decode_tps, prefill_tps
model = rlx.load(sys.argv[1], kv_dtype=kv)
model.next_logits([1, 2])
out = {}
for n in (64, 256, 512):
    out[f"pp{n}"] = prefill_tps(model, n, 1)
for n in (32, 128):
    out[f"tg{n}"] = decode_tps(model, n, 1)
print(json.dumps(out))
"""
)

_DEPTH = (
    _SETTING
    + """
from rlx.models.bench import depth_decode_tps
model = rlx.load(sys.argv[1], kv_dtype=kv)
out = {}
for d in map(int, sys.argv[3].split(",")):
    out[f"tg64@d{d}"] = depth_decode_tps(model, d, 64, 2)
print(json.dumps(out))
"""
)

KV = ("f16", "f32", "f16-cast")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2"], choices=list(MODELS))
    ap.add_argument("--depths", nargs="+", type=int, default=[0, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--kv",
        nargs="+",
        default=["f16", "f32"],
        choices=list(KV),
        help="settings to alternate; f16-cast: the f16 cache through an explicit cast node",
    )
    ap.add_argument(
        "--only", choices=["workload", "depth"], help="run one of the two workloads only"
    )
    ap.add_argument("--max-others", type=float, default=MAX_OTHERS)
    args = ap.parse_args()
    depths = ",".join(map(str, args.depths))
    lines: list[str] = []
    notes: list[str] = []
    for model in args.models:
        gguf = str(model_path(model))
        for kind, script, extra, cols in (
            ("workload", _WORKLOAD, [], ["pp64", "pp256", "pp512", "tg32", "tg128"]),
            ("depth", _DEPTH, [depths], [f"tg64@d{d}" for d in args.depths]),
        ):
            if args.only and kind != args.only:
                continue
            engines: dict[str, Any] = {
                kv: (
                    lambda kv=kv, s=script, e=extra, g=gguf: rlx_child(s, [g, kv, *e], args.threads)
                )
                for kv in args.kv
            }
            res = alternate(args.rounds, engines, f"{model} {kind}", args.max_others)
            lines.append(f"\n{MODELS[model]}, {kind}\n")
            lines.append("| KV cache | " + " | ".join(cols) + " | peak RSS MiB |")
            lines.append("|---|" + "---:|" * (len(cols) + 1))
            for kv in args.kv:
                cells = [summarise(res[kv], k)[1] for k in [*cols, "rss_mb"]]
                lines.append(f"| {kv} | " + " | ".join(cells) + " |")
            notes += round_notes(f"{model} {kind}", res, list(args.kv))
    print("\n".join(lines + [""] + notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
