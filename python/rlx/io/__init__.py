"""Model files: locating / installing packaged models (:mod:`rlx.io.models`) and
reading GGUF files (:mod:`rlx.io.gguf`)."""

from rlx.io.gguf import GGUFFile, TensorInfo, open_gguf
from rlx.io.models import MODELS, ModelNotAvailableError, cache_dir, ensure_model, model_path

__all__ = [
    "MODELS",
    "GGUFFile",
    "ModelNotAvailableError",
    "TensorInfo",
    "cache_dir",
    "ensure_model",
    "model_path",
    "open_gguf",
]
