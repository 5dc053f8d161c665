"""Tokenizers built from a GGUF file's tokenizer metadata.

A GGUF file carries its vocabulary under llama.cpp's keys
(``tokenizer.ggml.model``, ``.tokens``, ``.merges``, ``.scores``,
``.token_type``, ``.pre``, the special-token ids and ``add_*`` flags, and
``tokenizer.chat_template``). :class:`Tokenizer` turns those into a
``tokenizers`` pipeline:

* ``model == "gpt2"``: byte-level BPE with the file's merges; the text is split
  before BPE by the regex the ``pre`` type names (``smollm``: every digit alone,
  then GPT-2's split; ``qwen2``: Qwen's split; ``llama-bpe``: Llama 3's).
* ``model == "llama"``: SentencePiece-style BPE: spaces become ``▁``, pieces
  merge best-score-first (the merges are rebuilt from the vocabulary, since
  SentencePiece files list none), unknown characters fall back to ``<0xNN>``
  byte tokens. Gemma's merge order is its vocabulary order.

Control tokens (type 3) are matched whole in the text as special tokens and
user-defined tokens (type 4) as plain added tokens, as llama.cpp does.

Decoding goes through a per-token byte table, so a stream of ids can be turned
into text incrementally (:class:`StreamDecoder`) without ever splitting a
multi-byte UTF-8 character.
"""

from __future__ import annotations

import codecs
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

from rlx.errors import RlxError, UnsupportedOpError, WeightFormatError
from rlx.io.gguf import GGUFFile

__all__ = ["StreamDecoder", "Tokenizer", "TokenizerBase"]

# llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer split regexes (tokenizer.ggml.pre → regex run before byte-level BPE).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: pre type → (regexes applied in order, BPE ignore_merges).
_PRE_SPLITS: dict[str, tuple[tuple[str, ...], bool]] = {
    "default": ((_GPT2_SPLIT,), False),
    "gpt2": ((_GPT2_SPLIT,), False),
    "gpt-2": ((_GPT2_SPLIT,), False),  # llama.cpp's spelling (convert_hf_to_gguf.py)
    "smollm": ((r"\p{N}", _GPT2_SPLIT), False),
    "starcoder": ((r"\p{N}", _GPT2_SPLIT), False),
    "qwen2": ((_QWEN2_SPLIT,), False),
    "deepseek-r1-qwen": ((_QWEN2_SPLIT,), False),
    "llama-bpe": ((_LLAMA3_SPLIT,), True),
    "llama3": ((_LLAMA3_SPLIT,), True),
}

#: Texts of end-of-generation tokens besides ``eos_token_id`` (end of turn,
#: end of message, end of text), looked up in the vocabulary.
_EOG_TEXTS = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<EOT>",
)

#: Chat templates for files that carry none (Gemma 3 GGUFs): the turn format
#: of the model family, written for rlx.
_FALLBACK_TEMPLATES = {
    # Gemma: no system role (a system message is prepended to the first user
    # turn), "assistant" is called "model", BOS written by the template.
    "gemma": (
        "{{ bos_token }}"
        "{% set ns = namespace(system='') %}"
        "{% for m in messages %}"
        "{% if m['role'] == 'system' %}"
        "{% set ns.system = m['content'] ~ '\n\n' %}"
        "{% else %}"
        "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
        "{{ '<start_of_turn>' ~ role ~ '\n' }}"
        "{% if role == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}"
        "{{ m['content'] | trim }}{{ '<end_of_turn>\n' }}"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
    ),
}


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte → printable character table used by byte-level BPE: bytes
    that are printable Latin-1 stand for themselves, the others are moved to
    code points from U+0100 on, in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _fail(path: Union[str, os.PathLike[str]], what: str) -> WeightFormatError:
    return WeightFormatError(f"[tokenizer] {path}: {what}")


class StreamDecoder:
    """Turns token ids into text one at a time: bytes of a character split
    across tokens are held back until the character is complete."""

    def __init__(self, tokenizer: TokenizerBase, skip_special: bool = True) -> None:
        self._tok = tokenizer
        self._skip = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text that token ``token_id`` completes (possibly empty)."""
        return self._utf8.decode(self._tok.decode_piece(token_id, self._skip))

    def flush(self) -> str:
        """Whatever is still held back, with U+FFFD for an unfinished character."""
        return self._utf8.decode(b"", final=True)


class TokenizerBase(ABC):
    """What the GGUF and the HF tokenizers share on top of their ``encode``,
    ``decode_piece``, ``token_text``, ``bos_id`` / ``eos_id``,
    ``chat_template`` and ``path``."""

    path: Any
    bos_id: Optional[int]
    eos_id: Optional[int]
    #: ids that end a generation (EOS, end of turn, …)
    eos_ids: frozenset[int]
    chat_template: Optional[str]

    @abstractmethod
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` (see the subclasses)."""

    @abstractmethod
    def decode_piece(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes token ``token_id`` stands for (see the subclasses)."""

    @abstractmethod
    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id``."""

    def encode_batch(self, texts: Sequence[str], add_special: bool = True) -> list[list[int]]:
        """:meth:`encode` over several texts."""
        return [self.encode(t, add_special) for t in texts]

    def stream(self, skip_special: bool = True) -> StreamDecoder:
        """A :class:`StreamDecoder` for detokenising generated ids one by one."""
        return StreamDecoder(self, skip_special)

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        template: Optional[str] = None,
        **kwargs: Any,
    ) -> str:
        """Render ``messages`` (``[{"role": ..., "content": ...}]``) with the
        model's chat template in a sandboxed jinja2 environment, with the
        helpers HF templates expect (``raise_exception``, ``strftime_now``,
        ``tojson``, ``bos_token``, ``eos_token``). Encode the result with
        ``add_special=False``: the template writes BOS."""
        bos = self.token_text(self.bos_id) if self.bos_id is not None else ""
        eos = self.token_text(self.eos_id) if self.eos_id is not None else ""
        return render_chat_template(
            self.path, template or self.chat_template, messages, bos, eos,
            add_generation_prompt, **kwargs,
        )  # fmt: skip


class Tokenizer(TokenizerBase):
    """A tokenizer rebuilt from GGUF tokenizer metadata.

    >>> tok = Tokenizer.from_gguf(rlx.io.ensure_model("smollm2"))   # doctest: +SKIP
    >>> tok.decode(tok.encode("Hello world"))
    'Hello world'
    """

    def __init__(self, gguf: GGUFFile) -> None:
        self.path = gguf.path
        self.model = gguf.get_str("tokenizer.ggml.model")
        self.pre = gguf.get_str("tokenizer.ggml.pre", "default")
        self.architecture = gguf.get_str("general.architecture", "")
        # the vocabulary's texts are decoded on first use (:attr:`tokens`):
        # 262k Python strings are ~25 MB that running on token ids never needs
        n = self._n_tokens = gguf.str_list_len("tokenizer.ggml.tokens")
        self._tokens: Optional[list[str]] = None
        types = gguf.get_array("tokenizer.ggml.token_type", None)
        self.token_types: list[int] = [NORMAL] * n if types is None else types.tolist()
        if len(self.token_types) != n:
            raise _fail(self.path, f"{len(self.token_types)} token types for {n} tokens")

        def _id(key: str) -> Optional[int]:
            v = gguf.get_int(f"tokenizer.ggml.{key}", None)
            if v is not None and not 0 <= v < n:
                raise _fail(self.path, f"tokenizer.ggml.{key} = {v} is outside the vocab ({n})")
            return v

        self.bos_id = _id("bos_token_id")
        self.eos_id = _id("eos_token_id")
        self.unk_id = _id("unknown_token_id")
        self.pad_id = _id("padding_token_id")
        spm = self.model == "llama"
        self.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token", spm)
        self.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token", False)
        self.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix", spm)
        self.chat_template = gguf.get_str("tokenizer.chat_template", None)
        if self.chat_template is None and self.architecture.startswith("gemma"):
            self.chat_template = _FALLBACK_TEMPLATES["gemma"]

        eog = {i for i in (self.eos_id, _id("eot_token_id"), _id("eom_token_id")) if i is not None}
        eog.update(gguf.find_strs("tokenizer.ggml.tokens", _EOG_TEXTS).values())
        self.eos_ids: frozenset[int] = frozenset(eog)

        if self.model == "gpt2":
            if self.pre not in _PRE_SPLITS:
                raise UnsupportedOpError(
                    f"[tokenizer] {self.path}: pre-tokenizer {self.pre!r} is not supported; "
                    f"known: {', '.join(sorted(_PRE_SPLITS))}"
                )
        elif self.model != "llama":
            raise UnsupportedOpError(
                f"[tokenizer] {self.path}: tokenizer.ggml.model {self.model!r} is not supported "
                "(rlx reads 'gpt2' byte-level BPE and 'llama' SentencePiece vocabularies)"
            )
        #: the file the BPE pipeline is built from on first use (see :attr:`_hf`)
        self._gguf = gguf
        self._hf_built: Any = None
        self._build_lock = threading.Lock()
        self._plain_hf: Any = None
        self._pieces: Optional[list[bytes]] = None

    @property
    def tokens(self) -> list[str]:
        """The vocabulary's texts by id, as the file spells them (decoded
        from the file on first use)."""
        toks = self._tokens
        if toks is None:
            toks = self._tokens = self._gguf.get_str_list("tokenizer.ggml.tokens")
        return toks

    @property
    def _hf(self) -> Any:
        """The ``tokenizers`` pipeline (encoding, token ids of texts), built
        on first use: a model run on token ids (``rlx bench``, a server fed
        ids) never pays for it, and for Gemma3's 262k vocabulary it is
        about 1.7 s and 100+ MB. A vocabulary or merges table the library
        refuses raises :class:`rlx.WeightFormatError` here."""
        hf = self._hf_built
        if hf is None:
            with self._build_lock:
                if self._hf_built is None:
                    self._hf_built = self._build()
                hf = self._hf_built
        return hf

    def _build(self) -> Any:
        gguf = self._gguf
        try:
            if self.model == "gpt2":
                return self._build_byte_level(gguf, {t: i for i, t in enumerate(self.tokens)})
            return self._build_sentencepiece(gguf)
        except RlxError:
            raise
        except Exception as e:  # the library raises plain Exception
            if type(e) is not Exception:
                raise
            raise _fail(self.path, f"the tokenizer cannot be built ({e})") from e

    @classmethod
    def from_gguf(cls, path: Union[str, os.PathLike[str], GGUFFile]) -> Tokenizer:
        """The tokenizer of the GGUF file at ``path`` (or an open :class:`GGUFFile`)."""
        return cls(path if isinstance(path, GGUFFile) else GGUFFile(path))

    # ----------------------------------------------------------------- build
    def _added_tokens(self) -> list[Any]:
        """Control tokens as special added tokens, user-defined ones as plain
        added tokens (matched whole in the raw text, as llama.cpp does)."""
        from tokenizers import AddedToken

        out = []
        for tok, ty in zip(self.tokens, self.token_types):
            if ty == CONTROL:
                out.append(AddedToken(tok, special=True, normalized=False))
            elif ty == USER_DEFINED:
                out.append(AddedToken(tok, special=False, normalized=False))
        return out

    def _build_byte_level(self, gguf: GGUFFile, index: dict[str, int]) -> Any:
        from tokenizers import Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer

        split = _PRE_SPLITS.get(self.pre)
        if split is None:
            raise UnsupportedOpError(
                f"[tokenizer] {self.path}: pre-tokenizer {self.pre!r} is not supported; "
                f"known: {', '.join(sorted(_PRE_SPLITS))}"
            )
        regexes, ignore_merges = split
        merges = []
        for m in gguf.get_str_list("tokenizer.ggml.merges", []):
            a, sep, b = m.partition(" ")
            if not sep:
                raise _fail(self.path, f"merge {m!r} is not two tokens separated by a space")
            merges.append((a, b))
        # The vocab's byte-level spelling: a token in the byte alphabet stands for
        # its bytes; one that is not (a mislabelled control token) stays as text.
        bpe = models.BPE(dict(index), merges, ignore_merges=ignore_merges)
        hf = HFTokenizer(bpe)
        steps = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        hf.pre_tokenizer = pre_tokenizers.Sequence(steps)
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens([t for t in self._added_tokens() if t.special])
        hf.add_tokens([t for t in self._added_tokens() if not t.special])
        return hf

    def _merge_key(self, gguf: GGUFFile) -> list[float]:
        """Per token, how early it merges (higher = earlier)."""
        scores = gguf.get_array("tokenizer.ggml.scores", None)
        if scores is None or self.architecture.startswith("gemma"):
            # Gemma's merge order is its vocabulary order.
            return [-float(i) for i in range(len(self.tokens))]
        return [float(s) for s in scores]

    def _build_sentencepiece(self, gguf: GGUFFile) -> Any:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, normalizers

        # User-defined tokens (Gemma's runs of spaces, tabs and newlines, HTML
        # tags) are matched whole in the raw text before any of this, as
        # llama.cpp does: Gemma stores its space runs with real spaces, so BPE
        # (which sees ▁) could not reach them anyway, and greedy longest-first
        # matching is what llama.cpp produces for a 40-space run (31 + 9, where
        # BPE over ▁ would give 15 + 25).
        tokens = self.tokens
        vocab = {t: i for i, t in enumerate(tokens)}
        key = self._merge_key(gguf)
        mergeable = [
            i for i, ty in enumerate(self.token_types) if ty == NORMAL and len(tokens[i]) > 1
        ]
        # Best first; every split of a token into two vocabulary pieces is a
        # merge at that token's rank (SentencePiece's BPE joins any adjacent
        # pair whose concatenation is a piece, highest score first).
        mergeable.sort(key=lambda i: -key[i])
        get = vocab.__contains__
        merges: list[tuple[str, str]] = []
        push = merges.append
        for i in mergeable:
            t = tokens[i]
            for cut in range(1, len(t)):
                left = t[:cut]
                if get(left):
                    right = t[cut:]
                    if get(right):
                        push((left, right))
        unk = self.tokens[self.unk_id] if self.unk_id is not None else None
        bpe = models.BPE(
            vocab,
            merges,
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
        )
        hf = HFTokenizer(bpe)
        norm = [normalizers.Replace(" ", "\u2581")]
        if self.add_space_prefix:
            norm.insert(0, normalizers.Prepend("\u2581"))
        hf.normalizer = normalizers.Sequence(norm)
        hf.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        )
        added = self._added_tokens()
        hf.add_special_tokens([t for t in added if t.special])
        hf.add_tokens([t for t in added if not t.special])
        return hf

    # ---------------------------------------------------------------- encode
    @property
    def vocab_size(self) -> int:
        """Number of tokens in the vocabulary."""
        return self._n_tokens

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``.

        ``add_special`` adds BOS / EOS when the file asks for them
        (``tokenizer.ggml.add_bos_token`` …); ``parse_special`` matches control
        tokens written in the text (``<|im_start|>``) as single tokens, which is
        what a rendered chat template needs; with False they are tokenized as
        plain text.
        """
        hf = self._hf if parse_special else self._without_special()
        ids = hf.encode(text, add_special_tokens=False).ids
        if add_special and self.add_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def _without_special(self) -> Any:
        """A twin pipeline whose control tokens are not matched in text. It
        shares the BPE model (no rebuild) and keeps the user-defined tokens."""
        if self._plain_hf is None:
            from tokenizers import Tokenizer as HFTokenizer

            hf = HFTokenizer(self._hf.model)
            hf.normalizer = self._hf.normalizer
            hf.pre_tokenizer = self._hf.pre_tokenizer
            hf.decoder = self._hf.decoder
            added = self._hf.get_added_tokens_decoder().values()
            hf.add_tokens([t for t in added if not t.special])
            self._plain_hf = hf
        return self._plain_hf

    # ---------------------------------------------------------------- decode
    def _piece_table(self) -> list[bytes]:
        if self._pieces is None:
            if self.model == "gpt2":
                inv = {c: b for b, c in byte_alphabet().items()}
                pieces = []
                for tok in self.tokens:
                    try:
                        pieces.append(bytes(inv[c] for c in tok))
                    except KeyError:  # not byte-level spelled: a control/added text
                        pieces.append(tok.encode("utf-8"))
            else:
                pieces = []
                for tok, ty in zip(self.tokens, self.token_types):
                    if ty == BYTE and len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
                        pieces.append(bytes([int(tok[3:5], 16)]))
                    else:
                        pieces.append(tok.replace("\u2581", " ").encode("utf-8"))
            self._pieces = pieces
        return self._pieces

    def is_special(self, token_id: int) -> bool:
        """True for control tokens (BOS, EOS, turn markers …)."""
        return self.token_types[token_id] in (CONTROL, UNKNOWN, UNUSED)

    def decode_piece(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes token ``token_id`` stands for (may be part of a UTF-8
        character; join pieces before decoding, or use :class:`StreamDecoder`)."""
        if not 0 <= token_id < self._n_tokens:
            raise ValueError(f"token id {token_id} is outside the vocabulary ({self._n_tokens})")
        if skip_special and self.is_special(token_id):
            return b""
        return self._piece_table()[token_id]

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """The text of ``ids`` (invalid UTF-8 becomes U+FFFD)."""
        data = b"".join(self.decode_piece(int(i), skip_special) for i in ids)
        text = data.decode("utf-8", errors="replace")
        if self.model == "llama" and self.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id`` as the file spells it."""
        return self.tokens[token_id]

    def token_id(self, text: str) -> Optional[int]:
        """The id of the vocabulary entry spelled ``text``, if any."""
        return self._hf.token_to_id(text)

    def __repr__(self) -> str:
        return (
            f"Tokenizer({Path(self.path).name!r}, model={self.model}, pre={self.pre}, "
            f"vocab={self._n_tokens})"
        )


def render_chat_template(
    path: Union[str, os.PathLike[str]],
    source: Optional[str],
    messages: Sequence[dict[str, Any]],
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """Render a jinja chat template (``source``) in the sandboxed environment
    with the variables HF templates expect."""
    if source is None:
        raise _fail(path, "the model has no chat template")
    from jinja2.exceptions import TemplateError

    try:
        compiled = _jinja_env().from_string(source)
    except TemplateError as e:
        raise _fail(path, f"chat template does not compile: {e}") from None
    ctx: dict[str, Any] = {
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt,
    }
    ctx.update(kwargs)
    return compiled.render(messages=list(messages), **ctx)


class ChatTemplateError(Exception):
    """Raised by a chat template's ``raise_exception(...)``."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: Optional[int] = None, ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


_ENV: Any = None


def _jinja_env() -> Any:
    """The shared sandboxed environment (templates cannot touch Python internals)."""
    global _ENV
    if _ENV is None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        _ENV = env
    return _ENV
