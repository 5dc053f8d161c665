"""Build realistic-size random LFM2 and Mamba2 models for the speed comparison (issue 13.8).

No model hub is reachable, so the benchmark models are random-initialised from
transformers' own config classes (``AutoModelForCausalLM.from_config``, fixed seed,
float32, small noise on every 1-D parameter as in scripts/make_seq_fixtures.py), at the
shapes of the real small models, then converted with llama.cpp's
``convert_hf_to_gguf.py`` to one Q8_0 GGUF that both engines run (bench/ssm.py):

* ``lfm2``: LFM2-350M's shape: hidden 1024, 16 layers (10 short-conv with L_cache 3,
  6 GQA attention layers at 2, 5, 8, 10, 12, 14 with 16 heads / 8 KV heads), FFN 6656
  auto-adjusted to 4608, vocab 65536, tied embedding. 354.5M parameters, 360.7 MiB Q8_0.
* ``mamba2``: Mamba2-370m's shape: hidden 1024, 48 layers, expand 2 (d_inner 2048),
  head_dim 64 (32 heads), state 128, 1 group, conv 4, vocab 50288, tied embedding.
  368.3M parameters, 376.3 MiB Q8_0.

Random weights give meaningless text but the same bytes per token and the same work
per token as the real models, which is all a tokens/s comparison needs (both engines
are fed random token ids). The tokenizer is make_seq_fixtures.py's 512-token byte-level
BPE; the converter pads the vocabulary to the model's size with ``[PAD{i}]`` tokens.

Files (outside the repo, several hundred MB each): ``$RLX_CACHE_DIR/bench-models/``
(default ``~/.cache/rlx/bench-models/``), per model ``<name>/hf/`` (config.json,
model.safetensors, tokenizer files, meta.json) and ``<name>/<name>-q8_0.gguf``. Steps
already done are skipped (``--force`` redoes them). ``--check`` then runs each GGUF
briefly in llama.cpp (``llama-bench -p 16 -n 4``) and in rlx (``rlx.load`` + one
forward in the repo's .venv python, ``$RLX_PYTHON`` to override) and prints what each
says.

Run it with the peer python (torch + transformers, scripts/setup_peers.sh)::

    /work/peer-venv/bin/python scripts/make_bench_models.py [--models lfm2 mamba2] [--check]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = Path(os.environ.get("RLX_PEER_VENV", "/work/peer-venv"))
LLAMA_CPP = PEER_VENV / "build" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
DEFAULT_CONVERTER = LLAMA_CPP / "convert_hf_to_gguf.py"
SEED = 4321
NOISE = 0.02
QTYPE = "q8_0"

#: LFM2-350M's layer mix: attention at 2, 5, 8, 10, 12, 14, short conv elsewhere
LFM2_ATTN = (2, 5, 8, 10, 12, 14)

#: name -> (config class, transformers module, config kwargs, note)
MODELS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "lfm2": (
        "Lfm2Config",
        "lfm2",
        dict(
            vocab_size=65536,
            hidden_size=1024,
            intermediate_size=6656,
            block_auto_adjust_ff_dim=True,
            block_ffn_dim_multiplier=1.0,
            block_multiple_of=256,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=8,
            max_position_embeddings=128000,
            layer_types=["full_attention" if i in LFM2_ATTN else "conv" for i in range(16)],
            conv_L_cache=3,
            norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=None,
        ),
        "LFM2-350M shape: 10 short-conv + 6 GQA layers, FFN 4608 (6656 auto-adjusted)",
    ),
    "mamba2": (
        "Mamba2Config",
        "mamba2",
        dict(
            vocab_size=50288,
            hidden_size=1024,
            num_hidden_layers=48,
            expand=2,
            num_heads=32,
            head_dim=64,
            state_size=128,
            n_groups=1,
            conv_kernel=4,
            chunk_size=256,
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=None,
        ),
        "Mamba2-370m shape: 48 layers, d_inner 2048, 32 heads x 64, state 128, 1 group",
    ),
}


def bench_dir() -> Path:
    """``$RLX_CACHE_DIR/bench-models`` (default ``~/.cache/rlx/bench-models``)."""
    base = os.environ.get("RLX_CACHE_DIR") or "~/.cache/rlx"
    return Path(os.path.expanduser(base)) / "bench-models"


def gguf_path(name: str, qtype: str = QTYPE) -> Path:
    """Where the converted GGUF of benchmark model ``name`` lives."""
    return bench_dir() / name / f"{name}-{qtype}.gguf"


def hf_dir(name: str) -> Path:
    """Where the HF directory of benchmark model ``name`` lives."""
    return bench_dir() / name / "hf"


def make_hf(name: str) -> dict[str, Any]:
    """Build, seed, noise and save one model with the fixture tokenizer."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_seq_fixtures import make_tokenizer, save_tokenizer

    cls_name, module, kwargs, note = MODELS[name]
    cfg = getattr(importlib.import_module(f"transformers.models.{module}"), cls_name)(**kwargs)
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.ndim == 1:
                p.add_(NOISE * torch.randn(p.shape, generator=gen))
        out = model(torch.arange(8).unsqueeze(0) + 3).logits
    assert torch.isfinite(out).all(), f"{name}: non-finite logits"
    dst = hf_dir(name)
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    model.save_pretrained(str(dst), safe_serialization=True)
    save_tokenizer(make_tokenizer(), dst)
    n_params = sum(p.numel() for p in model.parameters())
    meta = {
        "name": name,
        "config_class": cls_name,
        "config_kwargs": kwargs,
        "note": note,
        "seed": SEED,
        "noise_on_1d_params": NOISE,
        "n_params": n_params,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "build_s": round(time.perf_counter() - t0, 1),
    }
    (dst / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return meta


def convert(name: str, converter: Path, qtype: str = QTYPE) -> Path:
    """``convert_hf_to_gguf.py`` through make_seq_fixtures.py's shim (GPT-2 pre-tokenizer)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_seq_fixtures import _CONVERT_SHIM

    dst = gguf_path(name, qtype)
    tmp = dst.with_suffix(".gguf.part")
    cmd = [sys.executable, "-c", _CONVERT_SHIM, str(converter), str(hf_dir(name))]
    cmd += ["--outfile", str(tmp), "--outtype", qtype]
    env = dict(os.environ, NO_LOCAL_GGUF="1", HF_HUB_OFFLINE="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join(r.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"{name}: convert_hf_to_gguf.py failed:\n{tail}")
    tmp.rename(dst)
    return dst


def llama_bench_bin() -> str | None:
    """``$LLAMA_BENCH``, ``$RLX_PEER_VENV/bin/llama-bench`` or one on PATH."""
    for cand in (os.environ.get("LLAMA_BENCH"), str(PEER_VENV / "bin" / "llama-bench")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return shutil.which("llama-bench")


def check_llama(gguf: Path) -> str:
    """A short llama-bench run (pp16 / tg4, 2 threads); its rows or its error."""
    exe = llama_bench_bin()
    if exe is None:
        return "no llama-bench binary (WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh)"
    cmd = [exe, "-m", str(gguf), "-t", "2", "-p", "16", "-n", "4", "-r", "1", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED ({r.returncode}): {r.stderr.strip()[-300:]}"
    rows = json.loads(r.stdout)
    return ", ".join(
        f"{'pp' + str(x['n_prompt']) if x['n_gen'] == 0 else 'tg' + str(x['n_gen'])} "
        f"{x['avg_ts']:.1f} t/s"
        for x in rows
    )


_RLX_CHECK = """
import sys, numpy as np, rlx
m = rlx.load(sys.argv[1])
lg = np.asarray(m.logits([3, 14, 15, 92, 65, 35, 89, 79]))
assert np.isfinite(lg).all()
print(f"ok: {type(m).__name__}, logits {lg.shape}, max|logit| {np.abs(lg).max():.3g}")
"""


def check_rlx(gguf: Path) -> str:
    """``rlx.load(gguf)`` and one 8-token forward in the rlx python; its line or its error."""
    py = os.environ.get("RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    r = subprocess.run([py, "-c", _RLX_CHECK, str(gguf)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    return r.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--converter", type=Path, default=DEFAULT_CONVERTER)
    ap.add_argument("--force", action="store_true", help="rebuild and reconvert")
    ap.add_argument("--check", action="store_true", help="run each GGUF in llama.cpp and rlx")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in args.models:
        if args.force or not (hf_dir(name) / "meta.json").exists():
            import torch

            torch.set_num_threads(2)
            meta = make_hf(name)
            print(f"{name}: {meta['n_params'] / 1e6:.1f}M parameters -> {hf_dir(name)}", flush=True)
        gguf = gguf_path(name)
        if args.force or not gguf.exists():
            t0 = time.perf_counter()
            convert(name, args.converter.resolve())
            print(f"{name}: converted in {time.perf_counter() - t0:.0f} s", flush=True)
        print(f"{name}: {gguf} ({gguf.stat().st_size / 2**20:.1f} MiB)", flush=True)
        if args.check:
            print(f"{name}: llama.cpp: {check_llama(gguf)}", flush=True)
            print(f"{name}: rlx: {check_rlx(gguf)}", flush=True)


if __name__ == "__main__":
    main()
