"""The ``rlx`` command line: ``rlx generate`` / ``rlx chat`` run a GGUF LLM,
``rlx bench`` measures one, ``rlx inspect`` prints what the fusion passes
did to its decode graph, ``rlx env`` lists the environment variables,
``rlx demo`` builds and prints a small transformer graph, ``rlx serve`` runs
an OpenAI-compatible HTTP server (:mod:`rlx.serve`). ``--trace FILE`` on the
model commands writes a Chrome / Perfetto trace (:mod:`rlx.trace`).

User errors never end in a traceback: a bad argument is an argparse error
(usage and ``rlx <cmd>: error: ...``, exit 2); a file, model or run problem
prints one ``rlx: error: ...`` line and exits 1; Ctrl-C exits 130 with at most
a one-line note (also during ``import``, see :mod:`rlx._boot`); a closed
output pipe (``rlx generate ... | head -c1``) exits quietly with 141, the
status of a process ended by SIGPIPE.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rlx import _rlx
from rlx.cli_inspect import _check_model_path, _cmd_inspect, inspect_model  # noqa: F401
from rlx.errors import RlxError
from rlx.graph import Graph


def _cmd_env(_args: argparse.Namespace) -> int:
    for name, default, meaning in _rlx.env_vars():
        print(f"{name:28} default={default!r:14} {meaning}")
    for name, problem in _rlx.env_problems():
        print(f"rlx: warning: {name}={os.environ.get(name, '')!r}: {problem}", file=sys.stderr)
    return 0


def _at_least(lo: int) -> Any:
    """An argparse type: an int ≥ ``lo``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"{n} is below the minimum of {lo}")
        return n

    parse.__name__ = f"integer >= {lo}"
    return parse


def _checked_text(text: str, what: str) -> str:
    """``text`` when it is valid Unicode (argv bytes that are not UTF-8 reach
    Python as lone surrogates), else an :class:`RlxError` naming ``what``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RlxError(
            f"[{what}] not valid UTF-8 (byte {e.start}: {text[e.start : e.end]!r}); "
            "give the text in UTF-8"
        ) from None
    return text


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


def _set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: set before the first run (the host's rayon pool is
    built lazily then; today it sizes itself from ``RAYON_NUM_THREADS``)."""
    if getattr(args, "threads", None):
        os.environ["RLX_NUM_THREADS"] = str(args.threads)
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)


def _load(args: argparse.Namespace) -> Any:
    import rlx

    _check_model_path(args.model)
    return rlx.load(args.model, progress=sys.stderr.isatty(), kv_dtype=args.kv_dtype)


def _sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "temperature": args.temp,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
        "stop": args.stop or None,
        "ignore_eos": args.ignore_eos,
    }


def _cmd_generate(args: argparse.Namespace) -> int:
    _set_threads(args)
    prompt = _checked_text(args.prompt, "prompt")
    model = _load(args)
    try:
        for piece in model.generate(
            prompt, max_tokens=args.n, chat=args.chat, **_sampling_kwargs(args)
        ):
            print(piece, end="", flush=True)
    except KeyboardInterrupt:
        print("\n[interrupted]", file=sys.stderr)
        return 130
    print()
    return 0


def _cmd_embed(args: argparse.Namespace) -> int:
    import json

    import rlx
    from rlx.models.decoder import DecoderModel

    texts = [_checked_text(t, "embed") for t in args.text]
    _check_model_path(args.model)
    model = rlx.load(args.model)
    embed = getattr(model, "embed", None)
    if embed is None or isinstance(model, DecoderModel):
        raise RlxError(
            f"[embed] {args.model} is not a sentence encoder (a decoder LLM: use "
            "`rlx generate`); embed takes a BERT-style .safetensors model such as minilm"
        )
    vecs = embed(texts)
    if args.json:
        print(json.dumps([[round(float(x), 7) for x in v] for v in vecs]))
        return 0
    for text, v in zip(args.text, vecs):
        head = " ".join(f"{x:+.4f}" for x in v[:6])
        print(f"{text!r}: dim {v.size}, [{head} ...]")
    if len(vecs) > 1:
        sims = vecs @ vecs.T
        print("cosine similarities:")
        for i, row in enumerate(sims):
            print("  " + " ".join(f"{x:6.3f}" for x in row) + f"   {args.text[i][:40]!r}")
    return 0


def _cmd_classify(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    import rlx
    from rlx.models.image_processor import ImageProcessor, load_image, top_labels
    from rlx.models.registry import VISION_MODEL_TYPES

    root = Path(args.model)
    if not (root / "config.json").is_file():
        raise RlxError(f"[classify] {args.model}: not a model directory (no config.json)")
    try:
        config = json.loads((root / "config.json").read_text())
    except ValueError as e:
        raise RlxError(f"[classify] {args.model}: config.json is not JSON ({e})") from e
    mt = config.get("model_type") if isinstance(config, dict) else None
    if mt not in VISION_MODEL_TYPES:
        raise RlxError(
            f"[classify] {args.model}: model_type {mt!r} is not an image classifier "
            f"(supported: {', '.join(sorted(VISION_MODEL_TYPES))})"
        )
    image = load_image(args.image)
    model: Any = rlx.load(str(root))
    logits = model.logits(ImageProcessor.from_dir(root)(image))[0]
    id2label = config.get("id2label") or {}
    for label, prob in top_labels(logits, id2label, args.top):
        print(f"{prob:8.4f}  {label}")
    return 0


def _cmd_transcribe(args: argparse.Namespace) -> int:
    from rlx.models.whisper import transcribe_file

    text = transcribe_file(
        args.model, args.audio, language=args.language, task=args.task,
        max_new_tokens=args.max_new_tokens, device=args.device,
    )  # fmt: skip
    print(text.strip())
    return 0


def _cmd_chat(args: argparse.Namespace) -> int:
    _set_threads(args)
    model = _load(args)
    tok = model.tokenizer
    history: list[dict[str, str]] = []
    print("rlx chat: empty line or Ctrl-D quits, Ctrl-C stops a reply", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if not line.strip():
            return 0
        try:
            _checked_text(line, "chat")
        except RlxError as e:
            print(f"rlx: error: {e}", file=sys.stderr)
            continue
        history.append({"role": "user", "content": line})
        ids = tok.encode(tok.apply_chat_template(history), add_special=False)
        from rlx.models.decoder import _stream_text
        from rlx.sampling import SamplingParams

        params = SamplingParams(args.temp, args.top_k, args.top_p)
        reply = ""
        try:
            tokens = model.generate_ids(ids, args.n, params, args.seed, ignore_eos=args.ignore_eos)
            for piece in _stream_text(tok, tokens, args.stop or []):
                reply += piece
                print(piece, end="", flush=True)
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)
        print()
        history.append({"role": "assistant", "content": reply})


def _cmd_bench(args: argparse.Namespace) -> int:
    _set_threads(args)
    from rlx.models import bench

    _check_model_path(args.model)
    profile = args.profile or os.environ.get("RLX_PROFILE", "").strip() not in ("", "0")
    res = bench.run(
        args.model,
        repeats=args.repeats,
        depths=tuple(args.depth),
        profile=profile,
        standard=not args.depth_only,
        kv_dtype=args.kv_dtype,
    )
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            if k == "profile":
                continue
            unit = " tok/s" if k.startswith(("pp", "tg")) else ""
            print(f"{k:14} {v}{unit}")
        if "profile" in res:
            print(bench.format_profile(res["profile"]))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from rlx import serve

    _set_threads(args)
    for m in args.model:
        _check_model_path(m.partition("=")[2] if "=" in m and not os.path.exists(m) else m)
    template = None
    if args.chat_template:
        with open(args.chat_template, encoding="utf-8") as fh:
            template = fh.read()
    models = serve.load_models(
        args.model,
        slots=args.slots,
        max_queue=args.queue,
        chat_template=template,
        default_max_tokens=args.max_tokens,
        progress=sys.stderr.isatty(),
        batch=args.batch,
        batch_ctx=args.batch_ctx,
        kv_dtype=args.kv_dtype,
    )
    return serve.run(models, host=args.host, port=args.port, log_level=args.log_level)


def _serve_args(sub: Any) -> None:
    srv = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (chat, completions, embeddings)"
    )
    srv.add_argument(
        "model",
        nargs="+",
        help="models to serve: packaged names, GGUF files, HF directories, BERT .safetensors; "
        "ID=PATH names one",
    )
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    srv.add_argument(
        "--port",
        type=_at_least(0),
        default=8080,
        help="port (default 8080; 0 = any free port, printed)",
    )
    srv.add_argument(
        "--slots",
        type=_at_least(1),
        default=4,
        help="generations at once per model, each with its own KV cache (default 4)",
    )
    srv.add_argument(
        "--batch",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="continuous batching: the slots' decode steps run as one batched step "
        "(attention-only models; default off: each slot runs on its own thread)",
    )
    srv.add_argument(
        "--batch-ctx",
        type=_at_least(2),
        default=None,
        help="positions per batched slot (its KV cache; default: the model's context, "
        "at most 2048); longer requests run on their own",
    )
    srv.add_argument(
        "--queue",
        type=_at_least(0),
        default=64,
        help="requests that may wait for a slot; more get HTTP 503 (default 64)",
    )
    srv.add_argument(
        "--max-tokens",
        type=_at_least(1),
        default=None,
        help="completion budget of chat requests without max_tokens "
        "(default: the rest of the context)",
    )
    srv.add_argument(
        "--chat-template",
        default=None,
        help="jinja chat template file (default: the model's, else ChatML)",
    )
    srv.add_argument("--threads", type=_at_least(0), default=0, help="host threads (0 = per core)")
    _kv_dtype_arg(srv)
    srv.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level (default warning)",
    )
    srv.set_defaults(fn=_cmd_serve)


def _kv_dtype_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kv-dtype",
        choices=["f16", "f32"],
        default=None,
        help="KV cache element type (default: f16 for GGUF files, f32 for HF directories)",
    )


def _model_args(p: argparse.ArgumentParser, sampling: bool = True) -> None:
    p.add_argument(
        "model",
        nargs="?",
        default="smollm2",
        help="smollm2 (default), gemma3-270m, qwen2.5-0.5b, a GGUF file or a Hugging Face "
        "directory (config.json + *.safetensors + tokenizer.json)",
    )
    p.add_argument(
        "--threads",
        type=_at_least(0),
        default=0,
        help="host threads (RLX_NUM_THREADS; 0 = one per core, at most 4 per core)",
    )
    _kv_dtype_arg(p)
    p.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="write a Chrome / Perfetto trace of the run (as RLX_TRACE=FILE)",
    )
    if sampling:
        p.add_argument("-n", type=_at_least(0), default=128, help="max new tokens (default 128)")
        p.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
        p.add_argument("--top-k", type=_at_least(0), default=0, help="top-k (0 = off)")
        p.add_argument("--top-p", type=float, default=1.0, help="top-p (1 = off)")
        p.add_argument("--seed", type=_at_least(0), default=None, help="sampling seed (>= 0)")
        p.add_argument("--stop", action="append", help="stop string (repeatable)")
        p.add_argument(
            "--ignore-eos", action="store_true", help="keep generating past EOS / end of turn"
        )


def _train_args(p: argparse.ArgumentParser) -> None:
    from rlx.train.run import add_arguments

    add_arguments(p)
    p.set_defaults(fn=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from rlx.train.run import run

    summary = run(args, log=lambda s: print(s, flush=True))
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlx`` script."""
    p = argparse.ArgumentParser(prog="rlx", description="rlx ML compiler and runtime")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env", help="list the environment variables rlx reads").set_defaults(fn=_cmd_env)
    demo = sub.add_parser("demo", help="build and print a small transformer-block graph")
    demo.add_argument("--layers", type=_at_least(1), default=1, help="decoder layers (default 1)")
    demo.add_argument("--seq", type=_at_least(1), default=8, help="tokens to run (default 8)")
    demo.set_defaults(fn=_cmd_demo)
    train = sub.add_parser("train", help="LoRA fine-tuning of an LLM, or a CNN on digits")
    _train_args(train)
    gen = sub.add_parser("generate", help="generate text with a GGUF LLM")
    _model_args(gen)
    gen.add_argument("-p", "--prompt", required=True, help="prompt text")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    gen.set_defaults(fn=_cmd_generate)
    chat = sub.add_parser("chat", help="chat with a GGUF LLM (REPL)")
    _model_args(chat)
    chat.set_defaults(fn=_cmd_chat)
    emb = sub.add_parser("embed", help="sentence embeddings with a BERT encoder (safetensors)")
    emb.add_argument("text", nargs="+", help="sentences to embed")
    emb.add_argument("--model", default="minilm", help="packaged name or .safetensors path")
    emb.add_argument("--json", action="store_true", help="print the vectors as JSON")
    emb.set_defaults(fn=_cmd_embed)
    cls = sub.add_parser("classify", help="top labels of an image (HF ViT / ResNet directory)")
    cls.add_argument("model", help="HF image-classification model directory")
    cls.add_argument("image", help="image file (PNG, JPEG, ...)")
    cls.add_argument("--top", type=_at_least(1), default=5, help="labels to print (default 5)")
    cls.set_defaults(fn=_cmd_classify)
    tr = sub.add_parser("transcribe", help="speech to text with an HF Whisper directory")
    tr.add_argument("model", help="HF Whisper model directory")
    tr.add_argument("audio", help="audio file (PCM WAV; FLAC etc. with soundfile installed)")
    tr.add_argument("--language", help="language code or token (default: the model's / detected)")
    tr.add_argument("--task", choices=["transcribe", "translate"], help="default: transcribe")
    tr.add_argument("--max-new-tokens", type=_at_least(1), help="tokens per 30 s chunk")
    tr.add_argument("--device", default="host", help="host, reference, metal-sim, metal")
    tr.set_defaults(fn=_cmd_transcribe)
    bench = sub.add_parser("bench", help="load time, prefill / decode tokens/s, peak RSS")
    _model_args(bench, sampling=False)
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--repeats", type=_at_least(1), default=3, help="runs per figure (median)")
    bench.add_argument(
        "--depth",
        type=_at_least(0),
        nargs="*",
        default=[],
        metavar="N",
        help="also tg64@dN: 64 decode steps after an N-token prompt",
    )
    bench.add_argument("--depth-only", action="store_true", help="skip pp64 / pp256 / tg32 / tg128")
    bench.add_argument(
        "--profile",
        action="store_true",
        help="print where a decode step's time goes per thunk kind, after a prompt of the "
        "largest --depth (as RLX_PROFILE=1)",
    )
    bench.set_defaults(fn=_cmd_bench)
    insp = sub.add_parser(
        "inspect", help="compile a model's decode (and prefill) graph and print the pass report"
    )
    _model_args(insp, sampling=False)
    insp.add_argument(
        "--seq", type=_at_least(0), default=0, help="also the prefill graph for N tokens"
    )
    insp.add_argument("--json", action="store_true", help="print one JSON object")
    insp.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write a self-contained HTML report: schedule per layer, arena lifetimes, "
        "Metal plan, pass report",
    )
    insp.add_argument(
        "--quantize",
        default=None,
        help="quantise the float linear weights at load (int8, int4/32a, fp8_e4m3, nvfp4, "
        "q8_0 ...) and print each layer's relative error",
    )
    insp.add_argument(
        "--train",
        action="store_true",
        help="compile the model's LoRA training step (--seq tokens, default 64) and print its "
        "saved activations with their lifetimes",
    )
    insp.add_argument(
        "--thunks",
        action="store_true",
        help="print the thunk-coverage table instead (no model is loaded)",
    )
    insp.set_defaults(fn=_cmd_inspect)
    _serve_args(sub)
    try:
        args = p.parse_args(argv)
        return _traced(args) if getattr(args, "trace", None) else int(args.fn(args))
    except KeyboardInterrupt:
        _quiet_stderr("\nrlx: interrupted")
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except RlxError as e:
        _quiet_stderr(f"rlx: error: {e}")
        return 1
    except OSError as e:
        # a file the user named (or RLX_CACHE_DIR) that cannot be read / written
        where = f": {e.filename}" if e.filename else ""
        what = e.strerror or str(e)
        _quiet_stderr(f"rlx: error: {what}{where}{_cache_hint(e)}")
        return 1


def _traced(args: argparse.Namespace) -> int:
    """Run the command under ``--trace FILE``; the trace is written even when
    the command fails or is interrupted."""
    from rlx import trace

    path = args.trace
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise RlxError(f"[trace] {path}: directory {parent} does not exist")
    tr = trace.start(path)
    try:
        return int(args.fn(args))
    finally:
        trace.stop()
        _quiet_stderr(
            f"rlx: trace of {len(tr.events)} events written to {path} (open it in ui.perfetto.dev)"
        )


def _cache_hint(e: OSError) -> str:
    """Point at RLX_CACHE_DIR when the failing path lies under it."""
    if not e.filename:
        return ""
    from rlx.io.models import cache_dir

    try:
        inside = os.path.abspath(str(e.filename)).startswith(os.path.abspath(cache_dir()))
    except (OSError, ValueError):
        return ""
    return " (under RLX_CACHE_DIR; point it at a writable directory)" if inside else ""


def _quiet_stderr(msg: str) -> None:
    """Print ``msg`` on stderr unless stderr is gone too."""
    try:
        print(msg, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the flush at
    interpreter exit does not raise (and print) a second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
