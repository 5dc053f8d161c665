"""Regenerate the Whisper oracle fixture ``tests/fixtures/hf/whisper-tiny/``
from transformers (no model hub: a tiny random-initialised
``WhisperForConditionalGeneration`` built from transformers' own
``WhisperConfig``, a tiny byte-level BPE ``WhisperTokenizer`` built here from
a vocabulary and merges, and a ``WhisperFeatureExtractor`` with a 2 s chunk).

The model: 80 mel bins, d_model 64, 2 encoder + 2 decoder layers, 4 heads,
FFN 128, 100 encoder positions (200 feature frames = 2 s), 32 decoder
positions, 290 tokens (256 bytes + 24 merges, then ``<|endoftext|>`` = 280,
``<|startoftranscript|>`` 281, ``<|en|>`` 282, ``<|de|>`` 283,
``<|translate|>`` 284, ``<|transcribe|>`` 285, ``<|startoflm|>`` 286,
``<|startofprev|>`` 287, ``<|nospeech|>`` 288, ``<|notimestamps|>`` 289).
Every 1-D parameter gets noise (``NOISE``). Seeded: a re-run writes the same
numbers.

``expected.npz``: ``waveform`` (1.3 s at 16 kHz: two tones + seeded noise),
``features`` [80, 200] (``WhisperFeatureExtractor.__call__``, padded to the
chunk), ``features_np`` (``_np_extract_fbank_features`` on the padded
waveform), ``encoder_output`` [100, 64], ``ids6`` (the forced prompt + 2
tokens), ``logits1`` [1, 290] (first token), ``logits6`` [6, 290],
``logits_cached`` [6, 290] (one token at a time through the KV cache),
``generated`` / ``generated_de`` (``generate`` ids: the default forced prompt,
``language="de"``, and ``task="translate"`` which detects the language:
``generated_translate``, ``detected_language``; ``max_new_tokens``
``MAX_NEW``; the new tokens only, as transformers returns them) and ``meta.json`` with
the decoded texts. Run with the peer python::

    /work/peer-venv/bin/python scripts/make_whisper_fixture.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hf" / "whisper-tiny"
SEED = 1717
NOISE = 0.1
MAX_NEW = 12
SPECIALS = [
    "<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>",
    "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
]  # fmt: skip
MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "a"),
    ("o", "n"), ("Ġ", "s"), ("r", "e"), ("Ġ", "w"), ("a", "t"), ("e", "n"), ("o", "r"),
    ("i", "s"), ("Ġ", "o"), ("e", "s"), ("i", "t"), ("a", "r"), ("Ġ", "b"), ("l", "l"),
    ("Ġ", "m"), ("o", "u"), ("e", "d"),
]  # fmt: skip
CONFIG = {
    "vocab_size": 256 + len(MERGES) + len(SPECIALS),
    "num_mel_bins": 80,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_source_positions": 100,
    "max_target_positions": 32,
    "pad_token_id": 280,
    "bos_token_id": 280,
    "eos_token_id": 280,
    "decoder_start_token_id": 281,
    "begin_suppress_tokens": [220, 280],
    "suppress_tokens": [1, 2, 7, 8, 9, 10, 14, 25, 286, 287, 288],
    "init_std": 0.3,
}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def vocab() -> dict[str, int]:
    # GPT-2's order: printable bytes first, then the rest (space "Ġ" is 220)
    v = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    for a, b in MERGES:
        v[a + b] = len(v)
    for s in SPECIALS:
        v[s] = len(v)
    return v


def waveform(n: int) -> np.ndarray:
    t = np.arange(n) / 16000.0
    rng = np.random.default_rng(SEED)
    w = 0.4 * np.sin(2 * np.pi * 440.0 * t) + 0.2 * np.sin(2 * np.pi * 1870.0 * t * (1 + t))
    return (w + 0.05 * rng.standard_normal(n)).astype(np.float32)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizer,
    )

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    v = vocab()
    assert len(v) == CONFIG["vocab_size"], len(v)
    tok = WhisperTokenizer(vocab=v, merges=list(MERGES))
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    assert [ids[s] for s in SPECIALS] == list(range(280, 290)), ids
    assert tok.convert_tokens_to_ids("Ġ") == 220

    cfg = WhisperConfig(**CONFIG)
    model = WhisperForConditionalGeneration(cfg).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(NOISE * torch.randn(p.shape, generator=gen))
    g = GenerationConfig(
        decoder_start_token_id=281,
        eos_token_id=280,
        pad_token_id=280,
        bos_token_id=280,
        max_length=CONFIG["max_target_positions"],
        suppress_tokens=CONFIG["suppress_tokens"],
        begin_suppress_tokens=CONFIG["begin_suppress_tokens"],
        forced_decoder_ids=[[1, 282], [2, 285], [3, 289]],
        lang_to_id={"<|en|>": 282, "<|de|>": 283},
        task_to_id={"translate": 284, "transcribe": 285},
        no_timestamps_token_id=289,
        is_multilingual=True,
    )
    model.generation_config = g
    fe = WhisperFeatureExtractor(feature_size=80, chunk_length=2, n_fft=400, hop_length=160)
    assert fe.nb_max_frames == 200

    wave = waveform(20800)  # 1.3 s
    feats = fe(wave, sampling_rate=16000, return_tensors="np")["input_features"][0]
    padded = np.zeros(fe.n_samples, np.float32)
    padded[: len(wave)] = wave
    feats_np = fe._np_extract_fbank_features(padded[None], "cpu")[0]
    prompt = [281, 282, 285, 289]
    ids6 = prompt + [v["Ġthe"], v["at"]]
    with torch.no_grad():
        x = torch.from_numpy(feats[None].astype(np.float32))
        enc = model.model.encoder(x).last_hidden_state
        dec = model.model.decoder

        def logits_of(tokens: list[int]) -> np.ndarray:
            h = dec(input_ids=torch.tensor([tokens]), encoder_hidden_states=enc)
            return model.proj_out(h.last_hidden_state)[0].numpy()

        logits1 = logits_of(ids6[:1])
        logits6 = logits_of(ids6)
        cached, past = [], None
        for t in ids6:
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[t]]),
                        past_key_values=past, use_cache=True)  # fmt: skip
            past = out.past_key_values
            cached.append(out.logits[0, -1].numpy())
        generated = model.generate(x, max_new_tokens=MAX_NEW, do_sample=False)
        generated_de = model.generate(x, max_new_tokens=MAX_NEW, do_sample=False, language="de")
        # task without language: transformers ignores forced_decoder_ids and detects it
        generated_tr = model.generate(x, max_new_tokens=MAX_NEW, do_sample=False, task="translate")
        detected = int(model.detect_language(x).item())
    gen_ids = generated[0].numpy().astype(np.int64)
    gen_de = generated_de[0].numpy().astype(np.int64)
    gen_tr = generated_tr[0].numpy().astype(np.int64)

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    model.save_pretrained(str(OUT), safe_serialization=True)
    tok.save_pretrained(str(OUT))
    fe.save_pretrained(str(OUT))
    np.savez_compressed(
        OUT / "expected.npz",
        waveform=wave,
        features=feats.astype(np.float32),
        features_np=feats_np.astype(np.float32),
        encoder_output=enc[0].numpy().astype(np.float32),
        ids6=np.asarray(ids6, np.int64),
        logits1=logits1.astype(np.float32),
        logits6=logits6.astype(np.float32),
        logits_cached=np.asarray(cached, np.float32),
        generated=gen_ids,
        generated_de=gen_de,
        generated_translate=gen_tr,
        detected_language=np.int64(detected),
    )
    meta = {
        "name": "whisper-tiny",
        "config_kwargs": CONFIG,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seed": SEED,
        "noise_on_1d_params": NOISE,
        "n_params": sum(p.numel() for p in model.parameters()),
        "max_new_tokens": MAX_NEW,
        "generated": gen_ids.tolist(),
        "generated_de": gen_de.tolist(),
        "generated_translate": gen_tr.tolist(),
        "detected_language": detected,
        "text": tok.decode(gen_ids, skip_special_tokens=True),
        "text_de": tok.decode(gen_de, skip_special_tokens=True),
        "max_abs_logit6": float(np.abs(logits6).max()),
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: meta[k] for k in ("n_params", "generated", "generated_de", "text")}))


if __name__ == "__main__":
    main()
