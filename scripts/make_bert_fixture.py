"""Write the tiny random-initialised BERT of ``tests/fixtures/bert_tiny/`` (for
the embeddings endpoint of ``rlx serve``) with its transformers embeddings.

Run by hand with the peer virtualenv (torch + transformers; never in CI)::

    /work/peer-venv/bin/python scripts/make_bert_fixture.py

Writes ``config.json`` + ``model.safetensors`` (transformers' ``BertModel``,
seed 0: 2 layers, hidden 32, 2 heads), ``tokenizer.json`` (a WordPiece
vocabulary over lower-case letters and a few words, BERT normaliser and
pre-tokeniser, ``[CLS] … [SEP]``), and ``expected.json``: per sentence the
token ids and the sentence embedding as sentence-transformers defines it for
MiniLM (mean of the last hidden states over the tokens, L2-normalised), all
computed by transformers / tokenizers (float32, eager).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "bert_tiny"
SENTENCES = [
    "the cat sat on the mat",
    "a quick brown fox jumps over the lazy dog",
    "hello world",
    "rlx serves embeddings",
    "zebra",
]
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "a",
    "quick",
    "brown",
    "fox",
    "dog",
    "hello",
    "world",
    "over",
    "lazy",
]


def main() -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = list(string.ascii_lowercase)
    vocab_list = specials + letters + [f"##{c}" for c in letters] + WORDS
    vocab = {t: i for i, t in enumerate(vocab_list)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab_list),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_act="gelu",
        attn_implementation="eager",
    )
    model = BertModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(OUT, safe_serialization=True)

    rows = []
    with torch.no_grad():
        for s in SENTENCES:
            ids = tok.encode(s).ids
            h = model(torch.tensor([ids])).last_hidden_state[0].double()
            m = h.mean(dim=0)
            m = m / m.norm()
            rows.append({"text": s, "ids": ids, "embedding": [float(x) for x in m]})
    meta = {
        "generator": "scripts/make_bert_fixture.py",
        "torch": torch.__version__,
        "sentences": rows,
    }
    (OUT / "expected.json").write_text(json.dumps(meta, indent=1) + "\n")
    for p in sorted(OUT.iterdir()):
        print(p.name, p.stat().st_size)


if __name__ == "__main__":
    main()
