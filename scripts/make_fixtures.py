"""Regenerate tests/fixtures/tokenizer_<model>.json from independent tokenizers.

The fixtures hold token ids of tricky strings (unicode, CJK, emoji, code with
tabs, runs of spaces and newlines, numbers, mixed case, a rendered chat prompt)
as produced by implementations that share no code with rlx:

* llama.cpp's tokenizer through ``llama-cpp-python`` (``Llama(path,
  vocab_only=True).tokenize``), the reference for what a GGUF vocabulary means;
* ``transformers`` (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``),
  which converts the GGUF vocabulary with its own code.

Each case records both results; ``ids`` is llama.cpp's when it was available,
else transformers', and ``primary`` says which. The tests read only the JSON.

Usage (the oracles live in their own virtualenv, not in rlx's ``.venv``)::

    .venv/bin/python scripts/make_fixtures.py --make-venv .venv-fixtures [--with-llama-cpp]
    .venv/bin/python scripts/make_fixtures.py --oracle-python .venv-fixtures/bin/python

The first command installs transformers (and, with ``--with-llama-cpp``, builds
llama-cpp-python 0.3.36 from source with the flags MODELS.md gives: ~5-15 min).
The second locates the models with ``rlx.io.ensure_model`` (installing them if
needed) and runs this same file in ``--oracle`` mode under the oracle python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MODELS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b")
LLAMA_CPP_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
)

#: (name, text): the strings every model's fixture covers.
CASES: list[tuple[str, str]] = [
    ("empty", ""),
    ("single_char", "a"),
    ("hello", "Hello world"),
    ("leading_trailing_spaces", "  leading spaces and trailing   "),
    ("latin_accents", "Ünïcödé: café naïve façade — “quotes” … straße"),
    ("cjk", "日本語のテキストと中文文本，还有한국어。"),
    ("emoji", "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇯🇵!"),
    ("code_tabs", "def f(x):\n\tif x > 0:\n\t\treturn x ** 2\n\treturn -x\n"),
    (
        "code_spaces",
        "class A:\n    def __init__(self):\n        self.value = {'a': [1, 2, 3]}\n",
    ),
    ("space_runs", "a  b   c    d\n\n\n\ne\r\n\tf \n \n"),
    ("long_spaces", " " * 40 + "x" + "\t" * 5 + "y"),
    ("numbers", "1234567 3.14159 -42 1,000,000 0x1F 2024-01-01 1e-5 007"),
    ("mixed_case", "HeLLo WoRLD camelCaseVariable snake_case_name SCREAMING_CASE iPhone"),
    ("contractions", "I'm sure they'll say it's what we've done; DON'T you'd've?"),
    ("punctuation", "!!!???... ---- ==== <<< >>> {}[]() @#$%^&*"),
    ("url_email", "https://example.com/path?q=1&r=2 user@example.org"),
    ("mixed_scripts", "Привет мир! مرحبا 🌍 नमस्ते Γειά σου"),
    ("newline_only", "\n"),
    # characters no vocabulary has whole: byte fallback / split UTF-8 sequences
    ("rare_chars", "𓀀𓁐 𠜎 ꙮ \U0001fae8 \ue000 z̴̢͝a̸l̶g̵o"),
]

#: The chat every fixture renders.
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Write 1234 in words, and say “héllo” in 日本語."},
    {"role": "assistant", "content": "One thousand two hundred thirty-four. こんにちは"},
    {"role": "user", "content": "Thanks!\n\tBye."},
]

#: Gemma GGUFs carry no chat template, so neither oracle can render one: the
#: expected text is spelled out here by hand from Gemma's documented turn
#: format (system text goes first in the first user turn).
GEMMA_CHAT_TEXT = (
    "<bos><start_of_turn>user\nYou are a terse assistant.\n\n"
    "Write 1234 in words, and say “héllo” in 日本語.<end_of_turn>\n"
    "<start_of_turn>model\nOne thousand two hundred thirty-four. こんにちは<end_of_turn>\n"
    "<start_of_turn>user\nThanks!\n\tBye.<end_of_turn>\n"
    "<start_of_turn>model\n"
)


# ----------------------------------------------------------------- oracle mode
def _transformers_tokenizer(path: Path) -> dict[str, Any]:
    """transformers' own GGUF vocabulary conversion (``convert_gguf_tokenizer``).

    ``AutoTokenizer.from_pretrained(dir, gguf_file=...)`` reads the metadata
    with a module that imports torch, and PyPI's Linux torch is a multi-GB
    CUDA build here; so the metadata is read with ``gguf.GGUFReader`` (also
    independent of rlx) and handed to the same conversion function.
    ``AutoTokenizer``'s BOS rule is applied here: ``tokenizer.ggml.add_bos_token``,
    default on for SentencePiece ("llama") vocabularies.
    """
    import gguf
    import transformers
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    reader = gguf.GGUFReader(str(path))
    wanted = ("tokenizer.", "general.architecture")
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith(wanted)}
    tdict = {
        name: meta[f"tokenizer.{key}"]
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in meta
    }
    backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tdict)
    tokens = tdict["tokens"]
    bos = meta.get("tokenizer.ggml.bos_token_id")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[bos] if bos is not None else None,
        eos_token=tokens[eos] if eos is not None else None,
    )
    fast.chat_template = meta.get("tokenizer.chat_template")
    add_bos = meta.get("tokenizer.ggml.add_bos_token", tdict.get("tokenizer_type") == "llama")
    return {
        "version": f"transformers {transformers.__version__} convert_gguf_tokenizer",
        "backend": backend,
        "fast": fast,
        "bos_id": bos,
        "add_bos": bool(add_bos),
    }


def _oracle(path: Path, model: str) -> dict[str, Any]:
    """Runs under the oracle python: tokenizes every case with each oracle."""
    out: dict[str, Any] = {"tools": {}, "cases": {}, "chat": None}
    tf = None
    try:
        tf = _transformers_tokenizer(path)
        out["tools"]["transformers"] = tf["version"]
    except Exception as e:  # recorded, the other oracle may still work
        out["tools"]["transformers_error"] = f"{type(e).__name__}: {e}"
    llm = None
    try:
        import llama_cpp

        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        out["tools"]["llama.cpp"] = f"llama-cpp-python {llama_cpp.__version__}"
    except Exception as e:
        out["tools"]["llama.cpp_error"] = f"{type(e).__name__}: {e}"

    def run(text: str, add_special: bool) -> dict[str, Optional[list[int]]]:
        res: dict[str, Optional[list[int]]] = {"transformers": None, "llama.cpp": None}
        if tf is not None:
            ids = list(tf["backend"].encode(text, add_special_tokens=False).ids)
            if add_special and tf["add_bos"] and tf["bos_id"] is not None:
                ids.insert(0, tf["bos_id"])
            res["transformers"] = ids
        if llm is not None:
            res["llama.cpp"] = list(llm.tokenize(text.encode("utf-8"), add_special, True))
        return res

    for name, text in CASES:
        out["cases"][name] = run(text, True)
    chat_text, rendered_by = None, None
    if model.startswith("gemma"):
        chat_text, rendered_by = GEMMA_CHAT_TEXT, "hand-written Gemma turn format"
    elif tf is not None and tf["fast"].chat_template:
        chat_text = tf["fast"].apply_chat_template(
            CHAT_MESSAGES, tokenize=False, add_generation_prompt=True
        )
        rendered_by = "transformers apply_chat_template"
    if chat_text is not None:
        out["chat"] = {"text": chat_text, "rendered_by": rendered_by, **run(chat_text, False)}
    return out


# ----------------------------------------------------------------- driver mode
def _make_venv(target: Path, with_llama_cpp: bool) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run(
        [*pip, "transformers", "gguf", "tokenizers", "jinja2", "sentencepiece", "protobuf"],
        check=True,
    )
    if with_llama_cpp:
        env = dict(os.environ, CMAKE_ARGS=LLAMA_CPP_CMAKE_ARGS)
        subprocess.run([*pip, "--no-cache-dir", "llama-cpp-python==0.3.36"], check=True, env=env)


def _fixture(model: str, oracle_python: str) -> dict[str, Any]:
    from rlx.io.models import MODELS as SPECS
    from rlx.io.models import ensure_model

    path = ensure_model(model)
    proc = subprocess.run(
        [oracle_python, __file__, "--oracle", str(path), model],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    res = json.loads(proc.stdout)
    tools = res["tools"]
    primary = "llama.cpp" if "llama.cpp" in tools else "transformers"
    if primary not in tools:
        raise SystemExit(f"{model}: no oracle worked: {tools}")
    cases = []
    for name, text in CASES:
        got = res["cases"][name]
        cases.append(
            {
                "name": name,
                "text": text,
                "add_special": True,
                "ids": got[primary],
                "ids_llama_cpp": got["llama.cpp"],
                "ids_transformers": got["transformers"],
                "oracles_agree": None
                if None in (got["llama.cpp"], got["transformers"])
                else got["llama.cpp"] == got["transformers"],
            }
        )
    chat = res["chat"]
    if chat is not None:
        chat = {
            "messages": CHAT_MESSAGES,
            "add_generation_prompt": True,
            "text": chat["text"],
            "rendered_by": chat["rendered_by"],
            "add_special": False,
            "ids": chat[primary],
            "ids_llama_cpp": chat["llama.cpp"],
            "ids_transformers": chat["transformers"],
        }
    return {
        "model": model,
        "file": path.name,
        "sha256": SPECS[model].sha256,
        "generated_by": tools,
        "primary": primary,
        "regenerate": "python scripts/make_fixtures.py --oracle-python <python with oracles>",
        "cases": cases,
        "chat": chat,
    }


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oracle", nargs=2, metavar=("GGUF", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--make-venv", type=Path, help="create a virtualenv with the oracles")
    ap.add_argument("--with-llama-cpp", action="store_true", help="also build llama-cpp-python")
    ap.add_argument("--oracle-python", default=str(ROOT / ".venv-fixtures" / "bin" / "python"))
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    args = ap.parse_args(argv)
    if args.oracle:
        json.dump(_oracle(Path(args.oracle[0]), args.oracle[1]), sys.stdout)
        return 0
    if args.make_venv:
        _make_venv(args.make_venv, args.with_llama_cpp)
        return 0
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        fx = _fixture(model, args.oracle_python)
        dest = FIXTURES / f"tokenizer_{model}.json"
        dest.write_text(json.dumps(fx, ensure_ascii=False, indent=1) + "\n")
        agree = sum(1 for c in fx["cases"] if c["oracles_agree"])
        print(f"{dest.relative_to(ROOT)}: {len(fx['cases'])} cases, primary {fx['primary']}, "
              f"oracles agree on {agree}; tools {fx['generated_by']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
