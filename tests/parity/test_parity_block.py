"""Whole-graph checks against numpy formulas written in the test: a
llama-style decoder block (rmsnorm → qkv → RoPE → causal GQA attention →
out proj → residual → SwiGLU MLP → residual) compiled on host and on the
reference device, against :meth:`_harness2.Block.numpy`."""

from __future__ import annotations

import pytest
from _harness2 import Block, check, transformer


@pytest.mark.parametrize(
    "width,heads,kv_heads,ffn,batch,seq",
    [(48, 6, 2, 72, 1, 11), (32, 4, 4, 40, 2, 7), (40, 5, 1, 24, 1, 1), (64, 8, 2, 96, 2, 16)],
)
def test_decoder_block(
    width: int, heads: int, kv_heads: int, ffn: int, batch: int, seq: int
) -> None:
    block = Block(width, heads, kv_heads, ffn)
    g, params, inputs, want = transformer(1, block, batch, seq, seed=width + seq)
    check(
        g, inputs, params, expect=want, native=["sgemm", "rms_norm", "rope", "attention", "binary"]
    )


def test_two_layers() -> None:
    # Two layers: the numpy oracle carries the residual stream through both.
    g, params, inputs, want = transformer(2, Block(24, 3, 1, 36), 1, 9, seed=5)
    check(g, inputs, params, expect=want, native=["sgemm", "attention"])
