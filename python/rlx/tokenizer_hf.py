"""The tokenizer of a Hugging Face directory: ``tokenizer.json`` through the
``tokenizers`` library, with the special tokens and chat template of
``tokenizer_config.json`` (or ``chat_template.jinja``) and the stop tokens of
``generation_config.json`` / ``config.json``.

:class:`HFTokenizer` offers what :class:`rlx.tokenizer.Tokenizer` (the GGUF
one) offers to the runtime and the CLI: ``encode``, ``decode``, a streaming
decoder over per-token bytes, ``apply_chat_template``, ``eos_ids``.
Per-token bytes come from the vocabulary spelling the decoder implies:
byte-level BPE (GPT-2 alphabet) or SentencePiece style (``▁`` = space,
``<0xNN>`` byte-fallback tokens).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.tokenizer import _EOG_TEXTS, TokenizerBase, byte_alphabet


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WeightFormatError(f"[tokenizer] {path}: not valid JSON ({e})") from e
    return data if isinstance(data, dict) else {}


def _token_text(v: Any) -> Optional[str]:
    """``"<s>"`` or ``{"content": "<s>", ...}`` → ``"<s>"``."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids(v: Any) -> list[int]:
    if isinstance(v, bool) or v is None:
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, list):
        return [int(x) for x in v if isinstance(x, int) and not isinstance(x, bool)]
    return []


def _decoder_kinds(spec: Any) -> set[str]:
    """Every decoder ``type`` in tokenizer.json's (possibly nested) decoder."""
    if not isinstance(spec, dict):
        return set()
    out = {str(spec.get("type", ""))}
    for d in spec.get("decoders", []) or []:
        out |= _decoder_kinds(d)
    return out


class HFTokenizer(TokenizerBase):
    """A tokenizer read from an HF directory (see the module doc)."""

    def __init__(self, root: Path, model_config: Optional[dict[str, Any]] = None) -> None:
        from tokenizers import Tokenizer as Tok

        self.path = root / "tokenizer.json"
        if not self.path.exists():
            raise WeightFormatError(f"[tokenizer] {root}: no tokenizer.json in the directory")
        try:
            self._hf = Tok.from_file(str(self.path))
        except Exception as e:  # the library raises plain Exception subclasses
            raise WeightFormatError(f"[tokenizer] {self.path}: cannot load ({e})") from e
        spec = _read_json(self.path)
        tc = _read_json(root / "tokenizer_config.json")
        gc = _read_json(root / "generation_config.json")
        mc = model_config or {}
        self.model = str((spec.get("model") or {}).get("type", ""))
        kinds = _decoder_kinds(spec.get("decoder"))
        self.byte_level = "ByteLevel" in kinds
        if not self.byte_level and self.model not in ("BPE", "Unigram"):
            raise UnsupportedOpError(
                f"[tokenizer] {self.path}: model {self.model!r} with decoder {sorted(kinds)} "
                "is not supported (byte-level BPE or SentencePiece-style vocabularies)"
            )
        self._n = self._hf.get_vocab_size(with_added_tokens=True)
        added = self._hf.get_added_tokens_decoder()
        self._added = {int(i): t for i, t in added.items()}
        self._special = frozenset(i for i, t in self._added.items() if t.special)

        def tok_id(key: str) -> Optional[int]:
            text = _token_text(tc.get(key))
            return self._hf.token_to_id(text) if text is not None else None

        self.bos_id = tok_id("bos_token")
        if self.bos_id is None:
            self.bos_id = next(iter(_ids(gc.get("bos_token_id")) + _ids(mc.get("bos_token_id"))),
                               None)  # fmt: skip
        self.eos_id = tok_id("eos_token")
        eos = set(_ids(gc.get("eos_token_id"))) | set(_ids(mc.get("eos_token_id")))
        if self.eos_id is not None:
            eos.add(self.eos_id)
        elif eos:
            self.eos_id = min(eos)
        eos.update(i for i in (self._hf.token_to_id(t) for t in _EOG_TEXTS) if i is not None)
        self.eos_ids: frozenset[int] = frozenset(i for i in eos if 0 <= i < self._n)
        self.add_bos: Optional[bool] = tc.get("add_bos_token")
        self.chat_template = self._template(root, tc)
        self._plain: Any = None
        self._pieces: Optional[list[bytes]] = None

    @staticmethod
    def _template(root: Path, tc: dict[str, Any]) -> Optional[str]:
        t = tc.get("chat_template")
        if isinstance(t, list):  # [{"name": "default", "template": ...}, ...]
            named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
            t = named.get("default", next(iter(named.values()), None))
        if isinstance(t, str):
            return t
        jinja = root / "chat_template.jinja"
        if jinja.exists():
            return jinja.read_text(encoding="utf-8")
        t = _read_json(root / "chat_template.json").get("chat_template")
        return t if isinstance(t, str) else None

    @classmethod
    def from_dir(cls, root: Any) -> HFTokenizer:
        """The tokenizer of the HF directory ``root``."""
        return cls(Path(root), _read_json(Path(root) / "config.json"))

    # ---------------------------------------------------------------- encode
    @property
    def vocab_size(self) -> int:
        """Number of tokens, added tokens included."""
        return self._n

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``: ``add_special`` runs tokenizer.json's
        post-processor (BOS …; ``add_bos_token`` of tokenizer_config.json
        overrides it when given); ``parse_special=False`` tokenizes special
        tokens written in the text as plain text."""
        hf = self._hf if parse_special else self._without_special()
        ids = list(hf.encode(text, add_special_tokens=add_special).ids)
        if add_special and self.add_bos is not None and self.bos_id is not None:
            has = bool(ids) and ids[0] == self.bos_id
            if self.add_bos and not has:
                ids.insert(0, self.bos_id)
            elif not self.add_bos and has:
                if hf.encode(text, add_special_tokens=False).ids[:1] != [self.bos_id]:
                    ids.pop(0)
        return ids

    def _without_special(self) -> Any:
        if self._plain is None:
            from tokenizers import Tokenizer as Tok

            self._plain = Tok.from_file(str(self.path))
            self._plain.encode_special_tokens = True
        return self._plain

    # ---------------------------------------------------------------- decode
    def _piece_table(self) -> list[bytes]:
        if self._pieces is None:
            inv = {c: b for b, c in byte_alphabet().items()}
            pieces = []
            for i in range(self._n):
                tok = self._hf.id_to_token(i) or ""
                if i in self._added:
                    pieces.append(self._added[i].content.encode("utf-8"))
                elif self.byte_level:
                    try:
                        pieces.append(bytes(inv[c] for c in tok))
                    except KeyError:
                        pieces.append(tok.encode("utf-8"))
                elif len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
                    pieces.append(bytes([int(tok[3:5], 16)]))
                else:
                    pieces.append(tok.replace("\u2581", " ").encode("utf-8"))
            self._pieces = pieces
        return self._pieces

    def is_special(self, token_id: int) -> bool:
        """True for special added tokens (BOS, EOS, turn markers …)."""
        return token_id in self._special

    def decode_piece(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes token ``token_id`` stands for (may be part of a character)."""
        if not 0 <= token_id < self._n:
            raise ValueError(f"token id {token_id} is outside the vocabulary ({self._n})")
        if skip_special and self.is_special(token_id):
            return b""
        return self._piece_table()[token_id]

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """The text of ``ids`` (tokenizer.json's decoder)."""
        return str(self._hf.decode([int(i) for i in ids], skip_special_tokens=skip_special))

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id``."""
        return str(self._hf.id_to_token(token_id))

    def token_id(self, text: str) -> Optional[int]:
        """The id of the vocabulary entry spelled ``text``, if any."""
        return self._hf.token_to_id(text)

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path.parent)!r}, model={self.model}, vocab={self._n})"
