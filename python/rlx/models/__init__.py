"""Decoder LLMs from GGUF files: ``rlx.load(path_or_name)`` →
:class:`DecoderModel` with ``.generate``, ``.logits``, ``.tokenizer``,
``.config``. One module per architecture (:mod:`.llama`, :mod:`.gemma3`,
:mod:`.qwen2`, :mod:`.qwen3`) on the shared blocks of :mod:`.blocks`."""

from rlx.models.base import Config
from rlx.models.decoder import ARCHITECTURES, DecoderModel, load

__all__ = ["ARCHITECTURES", "Config", "DecoderModel", "load"]
