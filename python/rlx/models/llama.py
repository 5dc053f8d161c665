"""Llama (SmolLM2): the plain pre-norm block, SwiGLU MLP, GQA.

llama.cpp's converter permutes the Q/K rows of HF llama checkpoints so that
RoPE rotates adjacent pairs (its "normal" rope mode): ``rope_kind="interleaved"``.
The output matrix is the token embedding when the file has no ``output.weight``.
"""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``llama`` file."""
    return Config.from_gguf(f, rope_kind="interleaved"), ArchSpec()
