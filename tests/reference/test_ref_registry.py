"""The registry holds each part-1 thunk exactly once; Memory bounds; the
counter RNG is bit-exact against values printed by the Rust definition."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest
import rlx.reference as ref
from _mem import Arena
from rlx.reference import REGISTRY, WEIGHT_TAG, Memory, reference
from rlx.reference.rng import splitmix64, uniform_at

PART1 = """
cast cast_host cast_trunc_f32 activation activation_out gelu_approx_out gelu_approx_host
fused_binary_activation fused_ternary_activation binary binary_broadcast bias_add compare
where fma elementwise_region batch_elementwise_region fused_swiglu sgemm batched_sgemm
fused_mm_bias_act grouped_matmul layer_norm group_norm layer_norm2d rms_norm
fused_residual_ln fused_residual_rms_norm ada_layer_norm gated_residual
fused_rms_norm_mul_silu attention fused_attn rope axial_rope2d_host gather narrow
split_lastax copy concat transpose gather_axis scatter_add reverse resize_nearest_2x
cpu_indexing softmax softmax_cross_entropy_dense softmax_cross_entropy_with_logits cumsum
reduce topk argreduce sample conv2d conv_transpose2d pool2d im2col
fused_depthwise_conv1d_bsc
""".split()

FAMILIES = ("elementwise", "matmul", "norm", "attention", "shape", "reduce", "conv")


def test_part1_list_has_no_duplicates() -> None:
    assert len(PART1) == len(set(PART1)) == 59


def test_every_part1_name_registered_exactly_once() -> None:
    missing = [n for n in PART1 if n not in REGISTRY]
    assert not missing, missing
    # exactly once: count registering definitions across the family modules
    counts: dict[str, int] = {}
    for fam in FAMILIES:
        mod = importlib.import_module(f"rlx.reference.{fam}")
        src = inspect.getsource(mod)
        for name in PART1:
            counts[name] = counts.get(name, 0) + src.count(f'@reference("{name}")')
    assert {n: c for n, c in counts.items() if c != 1} == {}


def test_each_registered_fn_lives_in_a_family_module() -> None:
    for name in PART1:
        assert REGISTRY[name].__module__.split(".")[-1] in FAMILIES, name


def test_duplicate_registration_raises() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        reference("sgemm")(lambda t, mem: None)
    assert REGISTRY["sgemm"].__module__ == "rlx.reference.matmul"


def test_unknown_thunk_raises() -> None:
    with pytest.raises(KeyError):
        ref.run_thunk({"name": "no_such_thunk"}, Memory(np.zeros(4, np.uint8)))


def test_view_past_end_raises() -> None:
    mem = Memory(np.zeros(64, np.uint8), np.zeros(16, np.uint8))
    mem.view(48, 4, np.float32)  # exactly fits
    with pytest.raises(IndexError):
        mem.view(52, 4, np.float32)
    with pytest.raises(IndexError):
        mem.view(WEIGHT_TAG | 8, 3, np.float32)  # weights buffer is 16 bytes


def test_reference_past_end_raises() -> None:
    a = Arena()
    x = a.put(np.ones(5, np.float32))
    mem = a.memory()
    with pytest.raises(IndexError):
        ref.run_thunk(
            {"name": "copy", "src": x, "dst": mem.arena.size - 8, "len": 5, "dt": "f32"}, mem
        )


def test_weight_tag_selects_weights_buffer() -> None:
    a = Arena()
    w = a.weight(np.arange(6, dtype=np.float32))
    d = a.out(6)
    a.run({"name": "copy", "src": w, "dst": d, "len": 6, "dt": "f32"})
    np.testing.assert_array_equal(a.get(d), np.arange(6, dtype=np.float32))


# Printed by a standalone Rust program with crates/rlx-ir/src/rng.rs's two
# functions (wrapping u64 arithmetic); 1234567 is also Vigna's published
# first SplitMix64 output for that seed.
SPLITMIX = {
    0: 16294208416658607535,
    1: 10451216379200822465,
    1234567: 6457827717110365317,
    2**64 - 1: 16490336266968443936,
    0xDEADBEEFCAFEF00D: 10384543611796878027,
}
UNIFORM_BITS = {
    (0, 0): 1063395496,
    (7, 3): 1063057940,
    (42, 1000): 1053004766,
    (2**64 - 1, 5): 1032918592,
    (123456789, 2**64 - 1): 1065264023,
}


def test_splitmix64_matches_rust() -> None:
    for x, want in SPLITMIX.items():
        assert splitmix64(x) == want


def test_uniform_at_matches_rust_bits() -> None:
    for (k, i), bits in UNIFORM_BITS.items():
        got = np.float32(uniform_at(k, i))
        assert float(got) == uniform_at(k, i)  # exact f32 value
        assert int(got.view(np.uint32)) == bits
