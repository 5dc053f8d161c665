"""``rlx inspect``: what the compiler made of a model (schedule, passes,
arena, Metal plan; ``--html`` for the picture, ``--train`` for a training
step's saved activations) and ``--thunks``, the seed thunk table."""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional

from rlx.errors import RlxError


def _check_model_path(model: str) -> None:
    """A directory is a model only with a ``config.json`` (a Hugging Face
    model directory); any other directory is a user error."""
    from pathlib import Path

    path = Path(model)
    if path.is_dir() and not (path / "config.json").is_file():
        raise RlxError(
            f"[load] {model} is a directory without config.json: give a GGUF file, "
            "a .safetensors file, a Hugging Face model directory or a packaged model name"
        )


def inspect_model(
    model_name: str,
    seq: int = 0,
    quantize: Optional[str] = None,
    executables: Optional[list[Any]] = None,
    kv_dtype: Optional[str] = None,
) -> dict[str, Any]:
    """Compile the decode graph of ``model_name`` (and the prefill graph of
    ``seq`` prompt tokens when ``seq > 0``) and collect each compile report:
    per pass its matches and thunks before / after, dispatches per run
    before and after the passes, the Metal plan's kernel dispatches,
    barriers and host commands, thunks and arena / state bytes. With
    ``quantize`` (a :func:`rlx.quantize` scheme) the float linear weights are
    quantised at load and ``quant_errors`` maps each to its relative error
    ``‖dequant(W) − W‖_F / ‖W‖_F``. The compiled executables are appended
    to ``executables`` when given (``--html`` draws them). ``kv_dtype``: the
    KV cache's element type (:func:`rlx.load`)."""
    from rlx.models.decoder import DecoderModel, load

    if seq < 0:
        raise RlxError(f"[inspect] --seq {seq}: need a token count of at least 1")
    model = load(model_name, quantize=quantize, kv_dtype=kv_dtype)
    if not isinstance(model, DecoderModel):
        raise RlxError(
            f"[inspect] {model_name} is not a decoder LLM (inspect reports decode graphs)"
        )
    cfg = model.config
    model.reset(max(seq, 1))
    wanted = [("decode", 1, True)] + ([("prefill", seq, False)] if seq else [])
    graphs = []
    for kind, n_new, decode in wanted:
        tokens, cache, exe = model.compiled(n_new, decode)
        if executables is not None:
            executables.append(exe)
        st = exe.stats
        graphs.append(
            {
                "graph": kind,
                "tokens": tokens,
                "cache_slots": cache,
                "passes": st["passes"],
                "dispatches_before": st["dispatches_lowered"],
                "dispatches_after": st["dispatches"],
                "thunks": st["thunks"],
                "metal_dispatches": st["metal_dispatches"],
                "metal_barriers": st["metal_barriers"],
                "metal_host": st["metal_host"],
                "metal_per_layer": metal_per_layer(exe, cfg.n_layers),
                "arena_bytes": st["arena_bytes"],
                "naive_bytes": st["naive_bytes"],
                "state_bytes": st["state_bytes"],
                "report": exe.report(),
            }
        )
    return {
        "model": model_name,
        "arch": cfg.arch,
        "layers": cfg.n_layers,
        "hidden": cfg.hidden,
        "graphs": graphs,
        "quantize": quantize,
        "quant_errors": dict(model.weights.quant_errors),
    }


def metal_per_layer(exe: Any, layers: int) -> dict[str, list[int]]:
    """The Metal plan's kernel dispatches and barriers of each layer
    (``dispatches[i]`` / ``barriers[i]`` for layer ``i``) and of the rest
    (``outside``: ``[dispatches, barriers]`` — embedding, final norm, head).
    A fused dispatch belongs to its first thunk's layer (the layer of the
    weights / states it touches, as the HTML report's schedule); a barrier
    to the layer of the command after it."""
    from rlx.report.data import collect

    data = collect(exe, "")
    layer_of = {r.index: r.layer for r in data.thunks}
    disp, bars, outside = [0] * layers, [0] * layers, [0, 0]
    pending = 0
    for c in data.commands:
        if c.kind == "barrier":
            pending += 1
            continue
        lay = layer_of.get(c.thunk, "")
        n = int(lay.split()[1]) if lay.startswith("layer ") else -1
        d, b = (disp, bars) if 0 <= n < layers else (None, None)
        if d is not None and b is not None:
            d[n] += c.kind == "dispatch"
            b[n] += pending
        else:
            outside[0] += c.kind == "dispatch"
            outside[1] += pending
        pending = 0
    outside[1] += pending
    return {"dispatches": disp, "barriers": bars, "outside": outside}


def _cmd_inspect_thunks(as_json: bool) -> int:
    """The thunk-coverage table (``rlx.thunk_coverage``): per variant the op
    or pass producing it, whether its probe graph reaches it, runs natively
    on the host and has a Metal kernel."""
    import dataclasses

    from rlx.thunk_coverage import complete, thunk_table

    rows = thunk_table()
    if as_json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        return 0

    def yn(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    # seed-host: "py" = explicit host variant (may call back into Python),
    # "metal" = the seed runs it on the host on Metal
    print(f"{'variant':30} {'reached':7} {'native':6} {'metal':5} {'seed-host':9} produced by")
    for r in rows:
        how = r.produced_by + (f"  [{r.error}]" if r.error else "")
        host = "py" if r.host_by_design else ("metal" if r.seed_metal_host else "")
        print(f"{r.variant:30} {yn(r.reached):7} {yn(r.native):6} {yn(r.metal):5} {host:9} {how}")
    reached = [r for r in rows if r.reached]
    native = sum(1 for r in reached if r.native)
    metal = sum(1 for r in reached if r.metal)
    by_design = sum(1 for r in rows if r.seed_metal_host)
    done = sum(1 for r in rows if complete(r))
    print(
        f"{len(rows)} thunk variants: {len(reached)} reached from the graph API, "
        f"{native} native on host, {metal} with a Metal kernel, {by_design} run on the "
        f"host by the seed; {done} complete, {len(rows) - done} gaps"
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    if args.thunks:
        return _cmd_inspect_thunks(args.json)
    _check_model_path(args.model)
    if args.train:
        return _cmd_inspect_train(args)
    exes: list[Any] = []
    info = inspect_model(args.model, args.seq, args.quantize, exes, args.kv_dtype)
    if args.html:
        from rlx.report import write_html

        write_html(info, exes, args.html)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(f"{info['model']}: {info['arch']}, {info['layers']} layers, hidden {info['hidden']}")
    for g in info["graphs"]:
        what = "token" if g["tokens"] == 1 else "tokens"
        print(f"\n{g['graph']} graph: {g['tokens']} new {what}, {g['cache_slots']} cache slots")
        print(g["report"])
        per = " per decode token" if g["graph"] == "decode" else ""
        before, after = g["dispatches_before"], g["dispatches_after"]
        print(f"dispatches{per}: {before} before passes, {after} after")
        print(
            f"metal plan{per}: {g['metal_dispatches']} kernel dispatches, "
            f"{g['metal_barriers']} barriers, {g['metal_host']} host commands"
        )
        per = g["metal_per_layer"]
        if per["dispatches"]:
            d, b = per["dispatches"], per["barriers"]
            print(
                f"metal plan per layer: at most {max(d)} dispatches and {max(b)} barriers "
                f"(mean {sum(d) / len(d):.1f} / {sum(b) / len(b):.1f} over {len(d)} layers); "
                f"outside the layers {per['outside'][0]} dispatches, {per['outside'][1]} barriers"
            )
        print(
            f"thunks {g['thunks']}, arena {g['arena_bytes']} B (naive {g['naive_bytes']} B), "
            f"state {g['state_bytes']} B"
        )
    errs = info["quant_errors"]
    if errs:
        print(f"\nquantised to {info['quantize']}: relative error ‖dequant(W) − W‖ / ‖W‖")
        for name, e in errs.items():
            print(f"  {name:48} {e:.3e}")
        print(f"  {'max':48} {max(errs.values()):.3e}")
    return 0


def _cmd_inspect_train(args: argparse.Namespace) -> int:
    """The LoRA training step of ``args.model`` (rank 8 on q / v, ``--seq``
    tokens, default 64): its saved activations with the planner's intervals
    and arena offsets for them, and the planner's arena."""
    from rlx.train.lora import LoraTrainer
    from rlx.train.saved import report

    seq = args.seq or 64
    tr = LoraTrainer(args.model, seq)
    st = tr.exe.stats
    print(f"{args.model}: LoRA training step, {seq} tokens, {len(tr.graph)} nodes")
    print(report(tr.graph, tr.loss_id, tr.exe))
    print(
        f"planner: arena {st['arena_bytes'] / 2**20:.1f} MiB (naive {st['naive_bytes'] / 2**20:.1f}"
        f" MiB), state {st['state_bytes'] / 2**20:.1f} MiB, {st['thunks']} thunks"
    )
    return 0
