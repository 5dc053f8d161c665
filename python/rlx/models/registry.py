"""The one registry of decoder families, keyed by GGUF
``general.architecture`` and by HF ``model_type`` (:data:`ARCHITECTURES`),
and :func:`open_model` (path → source, config, block spec, tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Union

from rlx.errors import RlxError, UnsupportedOpError, WeightFormatError
from rlx.io.gguf import GGUFFile, open_gguf
from rlx.models import (
    falcon_h1,
    gemma3,
    gemma3n,
    granitemoehybrid,
    jamba,
    lfm2,
    llama,
    mamba,
    mamba2,
    mixtral,
    olmoe,
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_5,
    qwen3_moe,
    qwen3_next,
)
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.source import GGUFSource, HFSource, TensorSource

#: the families, each under its GGUF architecture name
FAMILIES: tuple[Family, ...] = tuple(
    m.FAMILY
    for m in (
        falcon_h1, gemma3, gemma3n, granitemoehybrid, jamba, lfm2, llama, mamba, mamba2, mixtral,
        olmoe, qwen2, qwen2_moe, qwen3, qwen3_5, qwen3_moe, qwen3_next,
    )
) + (qwen3_5.FAMILY_MOE, gemma3n.FAMILY_MULTIMODAL)  # fmt: skip
#: GGUF ``general.architecture`` / HF ``model_type`` → family
ARCHITECTURES: dict[str, Family] = {
    key: fam for fam in FAMILIES for key in (fam.name, *fam.model_types)
}


#: HF ``model_type`` → image classifier module (its ``load(dir, device)``);
#: ``rlx.load`` returns these models as is (they are not decoders)
VISION_MODEL_TYPES: dict[str, str] = {"resnet": "rlx.models.resnet", "vit": "rlx.models.vit"}
#: HF ``model_type`` → speech model module (returned by ``rlx.load`` as is too)
AUDIO_MODEL_TYPES: dict[str, str] = {"whisper": "rlx.models.whisper"}


def vision_model(root: Path, device: str) -> Optional[Any]:
    """The image classifier or speech model of an HF directory whose
    ``config.json`` names a :data:`VISION_MODEL_TYPES` /
    :data:`AUDIO_MODEL_TYPES` model type, else None."""
    import importlib
    import json

    try:
        mt = json.loads((root / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None
    mod = VISION_MODEL_TYPES.get(mt) or AUDIO_MODEL_TYPES.get(mt)
    return None if mod is None else importlib.import_module(mod).load(root, device)


def _unknown(path: Any, what: str, arch: str) -> WeightFormatError:
    names = ", ".join(sorted(f.name for f in FAMILIES))
    return WeightFormatError(
        f"[load] {path}: {what} {arch!r} is not supported (supported: {names})"
    )


def open_model(path: Union[str, Path, GGUFFile]) -> tuple[TensorSource, Config, ArchSpec, Any]:
    """The tensor source, config, block spec and tokenizer of a GGUF file or
    an HF directory."""
    if not isinstance(path, GGUFFile) and Path(path).is_dir():
        return _open_hf(Path(path))
    f = path if isinstance(path, GGUFFile) else open_gguf(path)
    fam = ARCHITECTURES.get(f.architecture)
    if fam is None or fam.name != f.architecture:
        raise _unknown(f.path, "architecture", f.architecture)
    from rlx.models.hf_config import check_gguf_metadata, validate_config, validate_vocab
    from rlx.tokenizer import Tokenizer

    check_gguf_metadata(f)
    cfg, spec = fam.gguf(f)
    validate_config(cfg, f.path)
    src = GGUFSource(f, fam.names)
    tok = _tokenizer(f.path, lambda: Tokenizer.from_gguf(f))
    validate_vocab(cfg, src, tok)
    return src, cfg, spec, tok


def _tokenizer(path: Any, make: Callable[[], Any]) -> Any:
    """``make()``, with the ``tokenizers`` library's bare ``Exception`` (a
    vocabulary or merges table it refuses) as a WeightFormatError."""
    try:
        return make()
    except RlxError:
        raise
    except Exception as e:  # the library raises plain Exception
        if type(e) is not Exception:
            raise
        raise WeightFormatError(f"[tokenizer] {path}: the tokenizer cannot be built ({e})") from e


def _open_hf(root: Path) -> tuple[TensorSource, Config, ArchSpec, Any]:
    from rlx.models.hf_config import HFConfig, validate_config, validate_vocab
    from rlx.tokenizer_hf import HFTokenizer

    c = HFConfig(root)
    mt = c.model_type
    if mt == "gemma3" and isinstance(c.data.get("text_config"), dict):
        raise UnsupportedOpError(
            f"[load] {c.path}: model_type 'gemma3' is the multimodal Gemma 3; rlx loads "
            "the text model (model_type 'gemma3_text', Gemma3ForCausalLM)"
        )
    fam = next((f for f in FAMILIES if mt in f.model_types), None)
    if fam is None:
        raise _unknown(c.path, "model_type", mt)
    cfg, spec = fam.hf(c)
    validate_config(cfg, c.path)
    src = HFSource(root, c.data, fam.names)
    if cfg.tied_output is False and not src.has("output.weight"):
        raise WeightFormatError(
            f"[load] {c.path}: tie_word_embeddings is false but there is no "
            f"{src.stored_name('output.weight')!r}"
        )
    out = src.meta("token_embd.weight" if cfg.tied_output else "output.weight")
    cfg.vocab = out.shape[0]  # the logits' width (may exceed the tokenizer's)
    tok = _tokenizer(root, lambda: HFTokenizer(root, c.data))
    validate_vocab(cfg, src, tok)
    return src, cfg, spec, tok
