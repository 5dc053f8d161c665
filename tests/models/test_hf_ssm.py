"""State-space / linear-attention families (rlx.models.mixers_ssm,
mixers_gdn) against the transformers fixtures of ``tests/fixtures/hf``
(tiny models briefly trained on a fixed text, float32, made by
scripts/make_seq_fixtures.py):
Mamba-2 (n_groups 1 and 2), Mamba-1, Qwen3-Next and Qwen3.5 (dense and MoE:
the shared MoE FFN of rlx.models.moe), Falcon-H1
(parallel Mamba-2 + attention, muP multipliers), GraniteMoeHybrid with and
without experts (``granitemoehybrid_dense``), Jamba with one expert (``jamba_dense``;
both made by scripts/make_ssm_dense_fixtures.py) and with MoE layers.

Per model and device: teacher-forced logits of 24 tokens, a 16-token
prefill + 8 ``next_logits`` decode steps against transformers' cached
decode, and 80 tokens (one prompt past a GDN chunk of 64); tolerance 1e-4 of
the largest |logit| (measured ≤ 1e-6 on host / reference / metal-sim);
on metal-sim every compiled plan (prefill and decode) has 0 host commands.
State checks: the conv / SSM / GDN states are zeroed by ``reset`` and shared
by every graph; prompts in chunks of non-bucket lengths; a prompt padded to
its bucket leaves the states and logits of the exact-length graph (the scans
stop on padded rows) and no graph is compiled per prompt length; the fusion
passes fire once per conv / GDN layer and the logits with them off equal
those with them on (1e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rlx
from hf_util import copy_fixture, expected, fixture, rel
from rlx.models import decoder
from test_hf_dirs import _three_checks

TOL = 1e-4
CONV_PASS = "fuse_depthwise_conv1d_bsc"
GDN_PASS = "fuse_gdn_gated_norm"
#: fixture → mixer kind of each layer
MODELS: dict[str, list[str]] = {
    "mamba2": ["mamba2", "mamba2"],
    "mamba2_g2": ["mamba2", "mamba2"],
    "mamba": ["mamba", "mamba"],
    "qwen3_next_dense": ["gdn", "gdn", "gdn", "attention"],
    "qwen3_5": ["gdn", "gdn", "gdn", "attention"],
    "qwen3_next": ["gdn", "gdn", "gdn", "attention"],
    "qwen3_5_moe": ["gdn", "gdn", "gdn", "attention"],
    "falcon_h1": ["mamba2_attention", "mamba2_attention"],
    "granitemoehybrid_dense": ["mamba2", "attention", "mamba2"],
    "granitemoehybrid": ["mamba2", "attention", "mamba2"],
    "jamba_dense": ["mamba", "attention", "mamba", "attention"],
    "jamba": ["mamba", "attention", "mamba", "attention"],
}
DEVICES = ("host", "reference", "metal-sim")


def _ids(e: dict[str, np.ndarray], n: int = 24) -> list[int]:
    return [int(t) for t in e[f"ids{n}"]]


def _has(model: rlx.DecoderModel, kind: str) -> int:
    return sum(m == kind for m in model.config.mixers)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers(name: str, device: str) -> None:
    d = fixture(name)
    e = expected(d)
    model = rlx.load(str(d), device=device)
    assert model.config.mixers == MODELS[name]
    assert model.config.vocab == e["logits24"].shape[1]
    errs = _three_checks(model, e)
    assert max(errs) < TOL, f"{name} on {device}: full / prefill+decode / 80 = {errs}"
    if device == "metal-sim":  # every plan (prefill 16 / 24 / 80, decode): kernels only
        assert any(k[0] == 1 for k in model._runners) and len(model._runners) > 1
        for r in model._runners.values():
            st = r.exe.stats
            assert (st["metal_host"], st["metal_host_by_thunk"]) == (0, {}), r.exe.report()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("n_new", [1, 13, 64])
def test_passes_fire_on_every_layer(name: str, n_new: int) -> None:
    """In the graphs the runtime runs (exact prompt lengths)."""
    model = rlx.load(str(fixture(name)))
    model.reset(n_new + 1)
    exe = model._runner(n_new, model._cap, False).exe
    conv = sum(m != "attention" for m in model.config.mixers)
    assert exe.stats["pass_matches"][CONV_PASS] == conv
    assert exe.stats["pass_matches"][GDN_PASS] == _has(model, "gdn")
    assert "conv2d" not in exe.schedule


@pytest.mark.parametrize("name", MODELS)
def test_passes_on_and_off_give_the_same_logits(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    e = expected(fixture(name))
    out = []
    for disable in ("", f"{CONV_PASS},{GDN_PASS}"):
        monkeypatch.setenv("RLX_DISABLE_PASS", disable)
        model = rlx.load(str(fixture(name)))
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
    assert rel(dec_on, e["prefill16_decode8"][15:]) < TOL


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("cuts", [(13,), (5, 8), (1, 1, 1, 1, 17)])
def test_prompts_of_any_length_and_chunking(name: str, cuts: tuple[int, ...]) -> None:
    e = expected(fixture(name))
    ids = _ids(e)
    model = rlx.load(str(fixture(name)))
    model.reset(24)
    rows, at = [], 0
    for n in cuts:
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    rows += [model.next_logits([t]) for t in ids[at:]]
    ends = np.cumsum(cuts) - 1
    want = np.concatenate([e["logits24"][ends], e["logits24"][at:]])
    assert rel(np.stack(rows), want) < TOL


@pytest.mark.parametrize("name", MODELS)
def test_reset_zeroes_the_states_and_graphs_share_them(name: str) -> None:
    e = expected(fixture(name))
    model = rlx.load(str(fixture(name)))
    list(model.generate_ids(_ids(e)[:20], 6, ignore_eos=True))
    cfg = model.config
    owner = model._owners[model._cap]
    from rlx.models.mixers import MIXERS

    names = [n for i in range(cfg.n_layers) for n in MIXERS[cfg.mixer(i)].recurrent(cfg, i)]
    assert names and all(np.any(owner.exe.state(n) != 0) for n in names)
    runners = [r for (s, c, _), r in model._runners.items() if c == model._cap]
    assert len(runners) >= 2 and all(r.exe.shares_state_with(owner.exe) for r in runners)
    model.reset(24)
    assert all(not np.any(owner.exe.state(n)) for n in names)
    assert rel(model.next_logits(_ids(e)), e["logits24"][-1]) < TOL


def _states(model: rlx.DecoderModel) -> dict[str, np.ndarray]:
    from rlx.models.mixers import MIXERS

    cfg, owner = model.config, model._owners[model._cap]
    names = [n for i in range(cfg.n_layers) for n in MIXERS[cfg.mixer(i)].recurrent(cfg, i)]
    return {n: owner.exe.state(n).copy() for n in names if not n.startswith("conv")}


@pytest.mark.parametrize("name", ["mamba2_g2", "mamba", "qwen3_next_dense", "falcon_h1"])
def test_padded_bucket_equals_exact_length(name: str) -> None:
    """Prompts of 5 and 13 tokens run in the one 16-token bucket graph, padded
    or on a prefix of it (active extent; no graph per length), and leave the
    SSM / GDN states the exact-length graphs leave (1e-5 of the largest
    |state|; they differ in rounding only:
    the 16-row scans run chunked, the 5-row ones recurrent); the decode steps
    after them match transformers (1e-4). Without the scans' stop on padded
    rows the states are off by ~1e-1."""
    e = expected(fixture(name))
    ids = _ids(e)
    model = rlx.load(str(fixture(name)))
    runs = {}
    for n in (5, 13):
        model.reset(24)
        padded = model.next_logits(ids[:n])
        states = _states(model)
        runs[n] = padded, states, [model.next_logits([t]) for t in ids[n : n + 4]]
    assert {s for (s, c, _) in model._runners if c == model._cap} == {1, 16}
    # the exact-length graphs, as before the buckets (and without the active
    # extent, which runs the 16-row graph on a prefix where it can)
    model._exact = True
    try:
        decoder.ACTIVE_EXTENT = False  # read as each graph is compiled
        model._runners.clear()
        model._owners.clear()
        model._plans.clear()
        for n, (padded, got_states, decode) in runs.items():
            model.reset(24)
            exact = model.next_logits(ids[:n])
            assert (n, model._cap, False) in model._runners
            assert rel(padded, exact) < 1e-5
            assert rel(padded, e["logits24"][n - 1]) < TOL
            for k, want in _states(model).items():
                err = np.max(np.abs(got_states[k] - want))
                assert err <= 1e-5 * np.max(np.abs(want)), (n, k, err)
            assert rel(np.stack(decode), e["logits24"][n : n + 4]) < TOL
    finally:
        decoder.ACTIVE_EXTENT = True


def _patched(tmp_path: Path, name: str, patch: dict) -> Path:
    dst = tmp_path / name
    copy_fixture(fixture(name), dst, lambda c: c.update(patch))
    return dst


@pytest.mark.parametrize(
    ("name", "patch", "field"),
    [
        ("mamba2", {"time_step_limit": [0.0, 0.1]}, "time_step_limit"),
        ("mamba2", {"n_groups": 3}, "n_groups"),
        ("mamba2", {"hidden_act": "gelu"}, "hidden_act"),
        ("mamba", {"hidden_act": "relu"}, "hidden_act"),
        ("qwen3_next_dense", {"linear_value_head_dim": 32}, "linear_value_head_dim"),
        ("qwen3_next_dense", {"linear_num_value_heads": 3}, "linear_num_value_heads"),
        ("qwen3_5", {"text_config": {}}, "text decoder"),
        ("falcon_h1", {"mlp_bias": True}, "mlp_bias"),
        ("falcon_h1", {"mlp_multipliers": [1.0]}, "mlp_multipliers"),
        ("falcon_h1", {"mamba_n_groups": 3}, "mamba_n_groups"),
        ("granitemoehybrid_dense", {"position_embedding_type": None}, "position_embedding"),
        ("jamba_dense", {"attn_layer_offset": 2}, "attn_layer_offset"),
    ],
)
def test_unsupported_config_fields_are_named(
    tmp_path: Path, name: str, patch: dict, field: str
) -> None:
    with pytest.raises(rlx.RlxError, match=field):
        rlx.load(str(_patched(tmp_path, name, patch)))


def test_copy_cache_mode_is_refused() -> None:
    with pytest.raises(rlx.UnsupportedOpError, match="in-place cache"):
        rlx.load(str(fixture("mamba2")), inplace=False)


def test_config_read() -> None:
    cfg = rlx.load(str(fixture("mamba2_g2"))).config
    raw = json.loads((fixture("mamba2_g2") / "config.json").read_text())
    assert (cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups) == (
        raw["num_heads"], raw["head_dim"], raw["n_groups"],
    )  # fmt: skip
    assert cfg.ssm_inner == raw["expand"] * raw["hidden_size"]


@pytest.mark.parametrize("name", ["mamba2", "qwen3_next_dense", "jamba"])
def test_long_prompts_across_chunks_and_the_conv_ring(name: str) -> None:
    """Prompts past the largest bucket (several 256-row chunks) and past the
    conv ring: one chunking (256, 256, 48) equals another (7, 256, 250, 40,
    then 7 decode steps) within 1e-5 (the GDN runs chunked and recurrent)."""
    model = rlx.load(str(fixture(name)))
    model.config.ctx = 600  # default RoPE: the context limit is no model change
    ids = [int(t) for t in np.random.default_rng(5).integers(0, model.config.vocab, 560)]
    full = model.logits(ids)
    model.reset(len(ids))
    cuts = (7, 256, 250, 40, 1, 1, 1, 1, 1, 1, 1)
    rows, at = [], 0
    for n in cuts:
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    assert at == len(ids)
    assert rel(np.stack(rows), full[np.cumsum(cuts) - 1]) < 1e-5
