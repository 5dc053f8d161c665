"""Loading Hugging Face directories: config.json layouts (transformers v4
``rope_theta`` / ``rope_local_base_freq`` / ``sliding_window_pattern`` vs v5
``rope_parameters`` / ``layer_types``), F16 / BF16 checkpoints multiplied
natively and zero-copy, sharded checkpoints, the errors for what rlx cannot
honour (each names the field), the tokenizer files, and ``rlx generate DIR``.

Oracles: the transformers logits of the fixtures (``expected.npz``); for
re-encoded weights, the same model with F32 weights holding the rounded
values (so the F16 / BF16 kernels are checked exactly, not through the
rounding error of the weights)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rlx
from hf_util import (
    DENSE,
    bf16_bits,
    bf16_value,
    copy_fixture,
    expected,
    fixture,
    hf_to_gguf,
    read_tensors,
    rel,
    write_safetensors,
)

TOL = 1e-4


def _to_v4(c: dict[str, Any]) -> None:
    """transformers v5 config → the v4 spelling of the same model."""
    rp = c.pop("rope_parameters")
    if "full_attention" in rp:  # gemma3: per layer type
        c["rope_theta"] = rp["full_attention"]["rope_theta"]
        c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
        c["rope_scaling"] = None
        types = c.pop("layer_types")
        # the fixture's pattern (sliding, full, sliding) is "every 2nd is global"
        assert types == ["sliding_attention" if (i + 1) % 2 else "full_attention"
                         for i in range(len(types))]  # fmt: skip
        c["sliding_window_pattern"] = 2
    else:
        c["rope_theta"] = rp["rope_theta"]
        c["rope_scaling"] = None
        c.pop("layer_types", None)


@pytest.mark.parametrize("name", DENSE)
def test_v4_config_layout_gives_the_same_model(tmp_path: Path, name: str) -> None:
    src = fixture(name)
    d = copy_fixture(src, tmp_path / name, _to_v4)
    e = expected(src)
    got = rlx.load(str(d)).logits([int(t) for t in e["ids24"]])
    assert rel(got, e["logits24"]) < TOL


@pytest.mark.parametrize("name", [*DENSE, "lfm2"])
def test_gguf_conversion_of_the_fixture_matches_transformers(tmp_path: Path, name: str) -> None:
    """The same model through the GGUF path: converted as llama.cpp does
    (gguf-py's tensor names; llama Q/K rows permuted → rlx's interleaved
    RoPE, Gemma norms + 1, LFM2 per-layer KV heads and 2-D conv taps), with
    the same tokenizer. GGUF has no ``query_pre_attn_scalar`` (llama.cpp
    scales Gemma 3 scores by 1/sqrt(head_dim)); the gemma3 fixture uses 24
    ≠ head_dim, so its GGUF is compared with the HF model at head_dim."""
    src = fixture(name)
    # the f32 KV cache: the conversion is checked at f32 rounding (1e-4); the
    # GGUF default f16 cache moves these logits by 1.3e-4 to 1.9e-4
    model = rlx.load(str(hf_to_gguf(src, tmp_path / f"{name}.gguf")), kv_dtype="f32")
    e = expected(src)
    ids = [int(t) for t in e["ids24"]]
    full, step = e["logits24"], e["prefill16_decode8"]
    if name == "gemma3":
        hd = json.loads((src / "config.json").read_text())["head_dim"]
        same = rlx.load(str(_edit("gemma3", tmp_path, query_pre_attn_scalar=hd)))
        full = same.logits(ids)
        same.reset(24)
        step = np.concatenate([same._feed(ids[:16], all_rows=True),
                               np.stack([same.next_logits([t]) for t in ids[16:]])])  # fmt: skip
        assert rel(full, e["logits24"]) > 1e-2  # the scalar matters
    assert rel(model.logits(ids), full) < TOL
    model.reset(24)
    pre = model._feed(ids[:16], all_rows=True)
    dec = np.stack([model.next_logits([t]) for t in ids[16:]])
    assert rel(np.concatenate([pre, dec]), step) < TOL
    hf = rlx.load(str(src))
    assert model.config.mixers == hf.config.mixers
    text = "hello world, 42 <|endoftext|>"
    assert model.tokenizer.encode(text) == hf.tokenizer.encode(text)


@pytest.mark.parametrize("name", ["qwen3", "lfm2"])
def test_quantised_gguf_on_metal_sim_matches_host(tmp_path: Path, name: str) -> None:
    """Q8_0 conversions (architectures test_metal_sim_decoder.py does not
    cover) through the Metal plan on msl-sim: the host's logits within 1e-4
    (host with f32 activations, see test_metal_sim_decoder.py)."""
    path = hf_to_gguf(fixture(name), tmp_path / f"{name}.gguf", "Q8_0")
    ids = [int(t) for t in expected(fixture(name))["ids24"]]
    before = rlx.set_int8_activations(False)
    try:
        host = rlx.load(str(path)).logits(ids)
        sim = rlx.load(str(path), device="metal-sim").logits(ids)
    finally:
        rlx.set_int8_activations(before)
    assert rel(sim, host) < TOL


#: transformers 5.24 ``ROPE_INIT_FUNCTIONS[type](config)`` for head_dim 16,
#: theta 1e4 (float32 values)
ROPE_SCALED = {
    "llama3": (
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
        [1.0, 0.24438458681106567, 0.013042256236076355, 0.0039528473280370235,
         0.0012499999720603228, 0.00039528473280370235, 0.0001250000059371814,
         3.9528473280370235e-05],
    ),
    "linear": (
        {"factor": 4.0},
        [0.25, 0.07905694097280502, 0.02500000037252903, 0.007905694656074047,
         0.0024999999441206455, 0.0007905694656074047, 0.0002500000118743628,
         7.905694656074047e-05],
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(ROPE_SCALED))
def test_rope_scaling_frequencies_match_transformers(tmp_path: Path, kind: str) -> None:
    params, want = ROPE_SCALED[kind]
    rp = {"rope_type": kind, "rope_theta": 10000.0, **params}
    model = rlx.load(str(_edit("llama", tmp_path, rope_parameters=rp)))
    assert len(model._inv_freq) == 1
    np.testing.assert_allclose(model._inv_freq[0], want, rtol=1e-6)
    # the v4 spelling (rope_scaling with "type") reads the same
    v4 = _edit("llama", tmp_path / "v4", rope_parameters=None, rope_theta=10000.0,
               rope_scaling={"type": kind, **params})  # fmt: skip
    np.testing.assert_allclose(rlx.load(str(v4))._inv_freq[0], want, rtol=1e-6)


def _reencode(src: Path, dst: Path, dtype: str) -> Path:
    """``dst``: ``src`` with every tensor in ``dtype`` (F16 / BF16);
    ``dst/f32``: the same rounded values as F32."""
    copy_fixture(src, dst, skip=("model.safetensors",))
    copy_fixture(src, dst / "f32", skip=("model.safetensors",))
    low, f32 = {}, {}
    for name, (_, a) in read_tensors(src / "model.safetensors").items():
        if dtype == "BF16":
            bits = bf16_bits(a)
            low[name], f32[name] = ("BF16", bits), ("F32", bf16_value(bits))
        else:
            h = a.astype(np.float16)
            low[name], f32[name] = ("F16", h), ("F32", h.astype(np.float32))
    write_safetensors(dst / "model.safetensors", low)
    write_safetensors(dst / "f32" / "model.safetensors", f32)
    return dst


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_half_weights_run_natively_and_zero_copy(tmp_path: Path, name: str, dtype: str) -> None:
    d = _reencode(fixture(name), tmp_path / name, dtype)
    e = expected(fixture(name))
    ids = [int(t) for t in e["ids24"]]
    half = rlx.load(str(d))
    ref = rlx.load(str(d / "f32"))
    # prefill rows and single-token decode (the GEMV path) both exact
    assert rel(half.logits(ids), ref.logits(ids)) < 1e-5
    half.reset(24)
    ref.reset(24)
    half.next_logits(ids[:20])
    ref.next_logits(ids[:20])
    assert rel(half.next_logits([ids[20]]), ref.next_logits([ids[20]])) < 1e-5
    # and still the transformers model, up to the weights' rounding
    assert rel(half.logits(ids), e["logits24"]) < (2e-2 if dtype == "BF16" else 2e-3)
    # the matmul weights are views of the mapped file, multiplied as f16 / bf16
    mm = half.weights.src._file("model.safetensors")._mm
    w = half.weights.values["blk.0.attn_q.weight"]
    assert w.dtype == np.uint8 and np.shares_memory(w, mm)
    sched = half.compiled(1, True)[2].schedule
    mms = [ln for ln in sched.splitlines() if "dequant_matmul_gguf" in ln]
    assert mms and all(f"gguf {dtype} " in ln for ln in mms)
    # converted once at load instead: the F32 kernels on the same values
    conv = rlx.load(str(d), half_weights="f32")
    assert rel(conv.logits(ids), ref.logits(ids)) < 1e-6
    assert not np.shares_memory(conv.weights.values["blk.0.attn_q.weight"], mm)
    with pytest.raises(rlx.RlxError, match="half_weights"):
        rlx.load(str(d), half_weights="f8")


def test_f32_weights_are_views_of_the_file() -> None:
    model = rlx.load(str(fixture("qwen2")))  # tied: token_embd is the output matrix
    mm = model.weights.src._file("model.safetensors")._mm
    mats = [n for n, v in model.weights.values.items() if v.ndim == 2]
    assert {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight"} <= set(mats)
    for name in mats:
        assert np.shares_memory(model.weights.values[name], mm), name


def test_unaligned_tensors_are_copied_aligned(tmp_path: Path) -> None:
    """A 6-byte F16 tensor first puts every F32 tensor at an address ≡ 2
    (mod 4): those few are copied to aligned memory, the logits unchanged."""
    src = fixture("gemma3")
    d = copy_fixture(src, tmp_path / "odd", skip=("model.safetensors",))
    t = {"aaa.pad": ("F16", np.zeros(3, np.float16)), **read_tensors(src / "model.safetensors")}
    write_safetensors(d / "model.safetensors", t)
    model = rlx.load(str(d))
    e = expected(src)
    assert rel(model.logits([int(x) for x in e["ids24"]]), e["logits24"]) < TOL
    w = model.weights.values["blk.0.attn_q.weight"]
    assert w.ctypes.data % 4 == 0


def test_sharded_checkpoint(tmp_path: Path) -> None:
    src = fixture("qwen3")
    d = copy_fixture(src, tmp_path / "sharded", skip=("model.safetensors",))
    tensors = read_tensors(src / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    index = {"metadata": {}, "weight_map": {}}
    for i, part in enumerate((names[:half], names[half:])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        write_safetensors(d / fname, {n: tensors[n] for n in part})
        index["weight_map"].update({n: fname for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    e = expected(src)
    assert rel(rlx.load(str(d)).logits([int(t) for t in e["ids24"]]), e["logits24"]) < TOL
    # a shard named by the index but absent is an error naming it
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(rlx.WeightFormatError, match="model-00002-of-00002"):
        rlx.load(str(d))


def _edit(name: str, tmp_path: Path, **fields: Any) -> Path:
    def patch(c: dict[str, Any]) -> None:
        for k, v in fields.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v

    return copy_fixture(fixture(name), tmp_path / name, patch)


@pytest.mark.parametrize(
    ("name", "fields", "error", "pattern"),
    [
        ("llama", {"model_type": "rwkv7"}, rlx.WeightFormatError, r"model_type 'rwkv7'.*lfm2"),
        ("llama", {"hidden_size": None}, rlx.WeightFormatError, r"'hidden_size' is missing"),
        ("llama", {"attention_bias": True}, rlx.UnsupportedOpError, r"'attention_bias'"),
        ("llama", {"hidden_act": "gelu"}, rlx.UnsupportedOpError, r"'hidden_act'"),
        ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
         rlx.UnsupportedOpError, r"rope_type 'yarn'"),
        ("qwen3", {"rope_parameters": None, "rope_theta": 1e6,
                   "rope_scaling": {"type": "dynamic", "factor": 2.0}},
         rlx.UnsupportedOpError, r"rope_scaling rope_type 'dynamic'"),
        ("gemma3", {"final_logit_softcapping": 30.0}, rlx.UnsupportedOpError,
         r"'final_logit_softcapping'"),
        ("gemma3", {"model_type": "gemma3", "text_config": {"hidden_size": 64}},
         rlx.UnsupportedOpError, r"gemma3_text"),
        ("gemma3", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
         rlx.UnsupportedOpError, r"layer_types\[1\] = 'chunked_attention'"),
        ("qwen2", {"num_key_value_heads": 3}, rlx.WeightFormatError, r"'num_key_value_heads'"),
        ("qwen2", {"tie_word_embeddings": False}, rlx.WeightFormatError, r"lm_head\.weight"),
    ],
)  # fmt: skip
def test_config_fields_rlx_cannot_honour_are_named(
    tmp_path: Path, name: str, fields: dict[str, Any], error: type, pattern: str
) -> None:
    d = _edit(name, tmp_path, **fields)
    with pytest.raises(error, match=pattern):
        rlx.load(str(d))


def test_missing_files_are_named(tmp_path: Path) -> None:
    src = fixture("llama")
    with pytest.raises(rlx.WeightFormatError, match="tokenizer.json"):
        rlx.load(str(copy_fixture(src, tmp_path / "a", skip=("tokenizer.json",))))
    with pytest.raises(rlx.WeightFormatError, match="safetensors"):
        rlx.load(str(copy_fixture(src, tmp_path / "b", skip=("model.safetensors",))))
    with pytest.raises(rlx.WeightFormatError, match="config.json"):
        rlx.load(str(copy_fixture(src, tmp_path / "c", skip=("config.json",))))
    # a tensor missing from the checkpoint: both names in the message
    d = copy_fixture(src, tmp_path / "d", skip=("model.safetensors",))
    t = read_tensors(src / "model.safetensors")
    del t["model.layers.1.mlp.up_proj.weight"]
    write_safetensors(d / "model.safetensors", t)
    with pytest.raises(rlx.WeightFormatError, match=r"blk\.1\.ffn_up\.weight.*up_proj"):
        rlx.load(str(d))


def test_tokenizer_files(tmp_path: Path) -> None:
    """tokenizer.json encodes as the tokenizers library does; the chat
    template and stop tokens come from tokenizer_config.json /
    generation_config.json."""
    from tokenizers import Tokenizer as Tok

    src = fixture("llama")
    tok = rlx.load(str(src)).tokenizer
    ref = Tok.from_file(str(src / "tokenizer.json"))
    text = "Hello, world! 123 héllo\n  tabs\tand <|endoftext|>"
    assert tok.encode(text) == ref.encode(text).ids
    ids = ref.encode(text).ids
    assert tok.decode(tok.encode(text)) == ref.decode(ids, skip_special_tokens=False)
    eot = ref.token_to_id("<|endoftext|>")
    assert tok.eos_ids == {eot}
    assert eot not in tok.encode(text, parse_special=False)
    # streaming pieces join to the text
    ids = tok.encode("naïve café")
    dec = tok.stream()
    assert "".join(dec.push(i) for i in ids) + dec.flush() == "naïve café"

    d = copy_fixture(src, tmp_path / "chat")
    tc = json.loads((d / "tokenizer_config.json").read_text())
    tc["chat_template"] = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    (d / "tokenizer_config.json").write_text(json.dumps(tc))
    gc = json.loads((d / "generation_config.json").read_text())
    gc["eos_token_id"] = [eot, 7]
    (d / "generation_config.json").write_text(json.dumps(gc))
    tok = rlx.load(str(d)).tokenizer
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<user>hi"
    assert tok.eos_ids == {eot, 7}


def test_cli_generate_on_a_directory() -> None:
    d = fixture("qwen2")
    r = subprocess.run(
        [sys.executable, "-m", "rlx.cli", "generate", str(d), "-p", "Hello", "-n", "6",
         "--ignore-eos"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    model = rlx.load(str(d))
    want = "".join(model.generate("Hello", max_tokens=6, ignore_eos=True))
    assert r.stdout == want + "\n"
