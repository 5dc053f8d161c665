"""LoRA fine-tuning (:class:`rlx.train.LoraTrainer`) on the tiny Llama
fixture (``tests/fixtures/gguf/llama-q8_0.gguf``: 2 layers, hidden 64,
Q8_0 weights kept packed and frozen): the loss falls, the input gradient of
the quantised matmuls through the dense copy equals the one computed from
the packed blocks (``dequant_mat_mul_t``, the default), a checkpoint
resumes bit for bit in a freshly compiled executable, and a scheduled,
accumulating trainer makes one update per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.optim import MICRO_STATE, STEP_STATE, AdamW, CosineSchedule
from rlx.train import CheckpointError, LoraConfig, LoraTrainer, load_checkpoint

GGUF = Path(__file__).resolve().parent.parent / "fixtures" / "gguf" / "llama-q8_0.gguf"
SEQ = 32


def _tokens(vocab: int) -> np.ndarray:
    # a learnable stream: one fixed random phrase of 24 tokens, repeated
    phrase = np.random.default_rng(7).integers(3, vocab, 24)
    return np.tile(phrase, 20)


def _trainer(lr: float = 2e-2, dense: bool = False) -> LoraTrainer:
    return LoraTrainer(
        GGUF, SEQ, LoraConfig(rank=4, alpha=8.0), AdamW(lr=lr, weight_decay=0.0),
        clip_norm=1.0, dense_backward=dense,
    )  # fmt: skip


def _train_alike(a: LoraTrainer, b: LoraTrainer, toks: np.ndarray) -> None:
    """Three steps of both: the same losses and gradient norms (1e-5 / 1e-4
    relative) and the same adapters after (1e-4 relative, 2e-5 absolute:
    Adam's g / sqrt(v) turns the last-bit differences of near-zero
    gradients into steps of lr size, and the int8 prefill GEMM's rounding
    of the activations can flip on them; measured 8e-6 on 4 of 256)."""
    for i in range(3):
        la, lb = a.step(a.batch(toks, i)), b.step(b.batch(toks, i))
        assert la["loss"] == pytest.approx(lb["loss"], rel=1e-5)
        assert la["grad_norm"] == pytest.approx(lb["grad_norm"], rel=1e-4)
    for n in a.adapters:
        np.testing.assert_allclose(a.exe.state(n), b.exe.state(n), rtol=1e-4, atol=2e-5)


def test_adapters_only_on_q_and_v_and_base_frozen() -> None:
    t = _trainer()
    assert sorted(t.adapters) == sorted(
        f"blk.{i}.{p}.lora_{ab}" for i in range(2) for p in ("attn_q", "attn_v") for ab in "ab"
    )
    # the base weights are params (bound, never written), still packed u8
    packed = [n for n in t.exe.params if n.endswith("attn_q.weight")]
    assert packed and all(t.exe.params[n].dtype == "u8" for n in packed)
    assert "blk.0.attn_q.weight.dense" not in t.exe.params  # layer 0's q gets no dx


def test_loss_falls() -> None:
    t = _trainer(lr=5e-2)
    toks = _tokens(t.config.vocab)
    losses = [t.step(t.batch(toks, i))["loss"] for i in range(40)]
    assert np.isfinite(losses).all()
    # 6.7 at the start (vocab 512: ln 512 = 6.2); rank-4 q / v adapters on a
    # random 2-layer model learn part of the repeated phrase (3.8 seen)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3]), losses


def test_dense_backward_equals_packed_transposed_product() -> None:
    toks = _tokens(_trainer().config.vocab)
    a, b = _trainer(dense=True), _trainer(dense=False)
    ops = [nd.op for nd in b.graph.nodes]
    assert "dequant_mat_mul_t" in ops and not any(n.endswith(".dense") for n in b.exe.params)
    assert "dequant_mat_mul_t" not in [nd.op for nd in a.graph.nodes]
    _train_alike(a, b, toks)


def test_checkpoint_resumes_bit_exactly(tmp_path: Path) -> None:
    n = 6
    straight = _trainer()
    toks = _tokens(straight.config.vocab)
    for i in range(n):
        straight.step(straight.batch(toks, i))
    first = _trainer()
    for i in range(n // 2):
        first.step(first.batch(toks, i))
    ck = tmp_path / "lora.safetensors"
    first.save(ck)
    del first
    resumed = _trainer()  # a new executable, compiled from scratch
    resumed.load(ck)
    assert resumed.step_count == n // 2
    for i in range(resumed.step_count, n):
        resumed.step(resumed.batch(toks, i))
    assert sorted(resumed.exe.states) == sorted(straight.exe.states)
    for name in straight.exe.states:
        a, b = straight.exe.state(name), resumed.exe.state(name)
        assert a.tobytes() == b.tobytes(), name
    assert straight.exe.state(STEP_STATE)[0] == n


def test_checkpoint_mismatch_is_an_error(tmp_path: Path) -> None:
    t = _trainer()
    ck = tmp_path / "a.safetensors"
    t.save(ck, adapters_only=True)
    with pytest.raises(CheckpointError, match="not in the file"):
        load_checkpoint(t.exe, ck)
    other = LoraTrainer(GGUF, SEQ, LoraConfig(rank=2))
    with pytest.raises(CheckpointError, match="lora_a") as e:
        load_checkpoint(other.exe, ck, strict=False)
    assert isinstance(e.value, rlx.RlxError)


def test_bad_config() -> None:
    with pytest.raises(rlx.RlxError, match="unknown target"):
        LoraTrainer(GGUF, SEQ, LoraConfig(targets=("q", "nope")))


def test_matmul_attention_equals_the_fused_op() -> None:
    """The textbook attention (matmuls + softmax) and the fused ``attention``
    op (backward: ``attention_backward``) train the same adapters."""
    toks = _tokens(_trainer().config.vocab)
    a = _trainer()
    b = LoraTrainer(
        GGUF, SEQ, LoraConfig(rank=4, alpha=8.0), AdamW(lr=2e-2, weight_decay=0.0),
        clip_norm=1.0, matmul_attention=False,
    )  # fmt: skip
    _train_alike(a, b, toks)


def test_grad_dense_weights_matches_numpy_and_checks_its_operand() -> None:
    """``rlx.grad(dense_weights=)``: the input gradient of a quantised matmul
    through a given f32 copy equals numpy's ``dy @ dequant(W)``; a copy of
    the wrong shape or dtype is an error naming the op."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autodiff"))
    from _gradcheck import evaluate

    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 64)).astype(np.float32)
    q = rlx.quantize(w, "q8_0")
    wd = q.dequantize()
    g = rlx.Graph("dq")
    x = g.input("x", [5, 64])
    wq = g.param("wq", list(q.w_q.shape), "u8")
    dense = g.param("wd", [6, 64])
    y = g.dequant_matmul(x, wq, *[g.constant(a) for a in q.aux], scheme=q.scheme, n=6, k=64)
    loss = g.sum(y * y)
    (dx,) = rlx.grad(g, loss, [x], dense_weights={wq: dense})
    g.outputs(y, dx)
    xs = rng.standard_normal((5, 64)).astype(np.float32)
    yv, dxv = evaluate(g, {"x": xs, "wq": q.w_q, "wd": wd})
    np.testing.assert_allclose(dxv, (2 * yv) @ wd, rtol=1e-5, atol=1e-5)
    bad = g.param("bad", [64, 6])
    with pytest.raises(rlx.RlxError, match="dequant_mat_mul.*expected"):
        rlx.grad(g, loss, [x], dense_weights={wq: bad})
    with pytest.raises(rlx.RlxError, match="f32 \\[n, k\\]"):
        rlx.grad(g, loss, [x], dense_weights={wq: g.param("i", [6, 64], "i32")})


def test_schedule_and_accumulation() -> None:
    """``accumulate=2``: a step takes two windows and makes one update; with
    warmup the first update has ``λ(0) = 0`` and leaves the adapters as they
    were (transformers' convention), the next ones move them; ``lr()``
    follows the cosine."""
    t = LoraTrainer(
        GGUF, SEQ, LoraConfig(rank=4, alpha=8.0), AdamW(lr=2e-2, weight_decay=0.0),
        clip_norm=1.0, schedule=CosineSchedule(4, warmup=1), accumulate=2,
    )  # fmt: skip
    toks = _tokens(t.config.vocab)
    ids = t.batch(toks, 0)
    assert ids.shape == (2, SEQ + 1)
    assert t.lr() == 0.0
    before = {n: t.exe.state(n).copy() for n in t.adapters}
    r = t.step(ids)
    assert np.isfinite(r["loss"]) and r["grad_norm"] > 0
    assert all(t.exe.state(n).tobytes() == a.tobytes() for n, a in before.items())
    assert t.exe.state(STEP_STATE)[0] == 1 and t.exe.state(MICRO_STATE)[0] == 0
    assert t.lr() == pytest.approx(2e-2) and t.lr(3) == pytest.approx(2e-2 * 0.25)
    t.step(t.batch(toks, 1))
    assert t.step_count == 2 and t.exe.state(STEP_STATE)[0] == 2
    assert any(t.exe.state(n).tobytes() != a.tobytes() for n, a in before.items())
    with pytest.raises(rlx.RlxError, match=r"step needs \[2, 33\] ids"):
        t.step(ids[0])
