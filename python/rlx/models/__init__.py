"""Decoder LLMs from GGUF files and Hugging Face directories:
``rlx.load(path_or_name)`` → :class:`DecoderModel` with ``.generate``,
``.logits``, ``.tokenizer``, ``.config``. One module per architecture
(:mod:`.llama`, :mod:`.gemma3`, :mod:`.qwen2`, :mod:`.qwen3`, :mod:`.lfm2`),
registered in :mod:`.registry`, on the shared layer stack of :mod:`.blocks`
and the shared mixers of :mod:`.mixers`; tensors through :mod:`.source`."""

from rlx.models.base import Config
from rlx.models.decoder import ARCHITECTURES, DecoderModel, load

__all__ = ["ARCHITECTURES", "Config", "DecoderModel", "load"]
