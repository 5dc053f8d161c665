"""LFM2's short-conv state (a ring per conv layer in the shared State buffer,
see rlx.models.mixers) against the transformers fixture
``tests/fixtures/hf/lfm2`` (conv, attention, conv; kernel 3): the depthwise
conv fuses (``fuse_depthwise_conv1d_bsc``) in prefill and decode graphs and
gives the same logits with the pass off; prompts whose length is not a
bucket size (padded rows), prompts in several chunks, ``reset`` between
sequences and a ring that wraps around; every graph shares one state.
Tolerance: 1e-4 of the largest |logit| against transformers (measured
≤ 1e-6); pass on vs off: 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from hf_util import expected, fixture, rel
from rlx.models.decoder import BUCKETS

PASS = "fuse_depthwise_conv1d_bsc"
TOL = 1e-4


def _ids(e: dict[str, np.ndarray], n: int = 24) -> list[int]:
    return [int(t) for t in e[f"ids{n}"]]


def _conv_layers(model: rlx.DecoderModel) -> int:
    cfg = model.config
    return sum(cfg.mixer(i) == "short_conv" for i in range(cfg.n_layers))


def test_hybrid_layer_stack_from_config() -> None:
    model = rlx.load(str(fixture("lfm2")))
    cfg = model.config
    assert cfg.mixers == ["short_conv", "attention", "short_conv"]
    assert (cfg.conv_kernel, cfg.conv_bias, cfg.tied_output) == (3, False, True)
    assert model.inplace


@pytest.mark.parametrize("n_new", [1, 16, 64])
def test_conv_fuses_in_every_conv_layer(n_new: int) -> None:
    model = rlx.load(str(fixture("lfm2")))
    model.reset(n_new + 1)
    _, _, exe = model.compiled(n_new, n_new == 1)
    assert exe.stats["pass_matches"][PASS] == _conv_layers(model)
    assert "conv2d" not in exe.schedule
    assert PASS in exe.report()


@pytest.mark.parametrize("device", ["host", "reference"])
def test_pass_on_and_off_give_the_same_logits(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    e = expected(fixture("lfm2"))
    out = []
    for disable in ("", PASS):
        monkeypatch.setenv("RLX_DISABLE_PASS", disable)
        model = rlx.load(str(fixture("lfm2")), device=device)
        model.reset(24)
        _, _, exe = model.compiled(16, False)
        assert ("conv2d" in exe.schedule) == bool(disable)
        full = model.logits(_ids(e))
        model.reset(24)
        steps = [model.next_logits(_ids(e)[:16])]
        steps += [model.next_logits([t]) for t in _ids(e)[16:]]
        out.append((full, np.stack(steps)))
    (full_on, dec_on), (full_off, dec_off) = out
    assert rel(full_on, full_off) < 1e-5 and rel(dec_on, dec_off) < 1e-5
    assert rel(full_on, e["logits24"]) < TOL
    assert rel(dec_on, e["prefill16_decode8"][15:]) < TOL


@pytest.mark.parametrize("cuts", [(13,), (5, 8), (11, 2, 3), (1, 1, 1, 1, 17)])
def test_prompts_of_any_length_and_chunking(cuts: tuple[int, ...]) -> None:
    """A prompt in chunks of non-bucket lengths (each padded to its bucket;
    the conv window must hold the last real rows), then decode steps."""
    e = expected(fixture("lfm2"))
    ids = _ids(e)
    model = rlx.load(str(fixture("lfm2")))
    model.reset(24)
    rows, at = [], 0
    for n in cuts:
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    rows += [model.next_logits([t]) for t in ids[at:]]
    ends = np.cumsum(cuts) - 1
    want = np.concatenate([e["logits24"][ends], e["logits24"][at:]])
    assert rel(np.stack(rows), want) < TOL


def test_reset_zeroes_the_conv_state_and_graphs_share_it() -> None:
    e = expected(fixture("lfm2"))
    model = rlx.load(str(fixture("lfm2")))
    list(model.generate_ids(_ids(e)[:20], 10, ignore_eos=True))
    cap = model._cap
    owner = model._owners[cap]
    conv = [f"conv{i}" for i in range(3) if model.config.mixer(i) == "short_conv"]
    assert all(np.any(owner.exe.state(n) != 0) for n in conv)
    runners = [r for (s, c, _), r in model._runners.items() if c == cap]
    assert len(runners) >= 2 and all(r.exe.shares_state_with(owner.exe) for r in runners)
    model.reset(24)
    assert all(not np.any(owner.exe.state(n)) for n in conv)
    # a second sequence after the first gives the fixture's logits
    assert rel(model.next_logits(_ids(e)), e["logits24"][-1]) < TOL


def test_ring_wraps_around() -> None:
    """Positions past the ring (max bucket + kernel − 1 rows), full-bucket
    chunks after a non-empty window: logits of one chunking (256, 256, 48)
    equal those of another (7, 256, 250, 40, then 7 decode steps)."""
    model = rlx.load(str(fixture("lfm2")))
    model.config.ctx = 600  # default RoPE: the context limit is no model change
    ids = [int(t) for t in np.random.default_rng(5).integers(0, model.config.vocab, 560)]
    assert len(ids) > 2 * (BUCKETS[-1] + model.config.conv_kernel - 1)
    full = model.logits(ids)
    model.reset(len(ids))
    rows, at = [], 0
    for n in (7, 256, 250, 40, 1, 1, 1, 1, 1, 1, 1):
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    assert at == len(ids)
    ends = np.cumsum([7, 256, 250, 40, 1, 1, 1, 1, 1, 1, 1]) - 1
    assert rel(np.stack(rows), full[ends]) < 1e-5


def test_copy_cache_mode_is_refused() -> None:
    with pytest.raises(rlx.UnsupportedOpError, match="in-place cache"):
        rlx.load(str(fixture("lfm2")), inplace=False)
