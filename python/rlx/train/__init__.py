"""Training on top of :mod:`rlx.optim`: LoRA fine-tuning of decoder LLMs
with frozen quantised weights (:class:`LoraTrainer`), a small CNN on
scikit-learn's digits (:mod:`rlx.train.digits`), safetensors checkpoints
that resume bit for bit (:func:`save_checkpoint` / :func:`load_checkpoint`)
and the training corpus shipped with Python (:func:`stdlib_corpus`)."""

from rlx.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    write_safetensors,
)
from rlx.train.corpus import stdlib_corpus
from rlx.train.lora import LoraConfig, LoraTrainer

__all__ = [
    "CheckpointError",
    "LoraConfig",
    "LoraTrainer",
    "load_checkpoint",
    "save_checkpoint",
    "stdlib_corpus",
    "write_safetensors",
]
