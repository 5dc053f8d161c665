"""BERT sentence encoders from safetensors (all-MiniLM-L6-v2 and friends):
``rlx.load("minilm")`` → :class:`BertEncoder` with ``.embed(sentences)``.

The graph per sequence length: word + position + token-type embedding rows,
LayerNorm, then per layer self-attention (q/k/v/output projections with
biases, bidirectional) and a GELU MLP, each followed by residual + post
LayerNorm. Sentence embeddings are the mean over tokens, L2-normalised (the
sentence-transformers pooling of these models).

Weights stay in the file: the projections run as ``dequant_matmul`` with the
``f32`` scheme straight on the ``[out, in]`` rows of the memmap (the layout
PyTorch stores, ``x @ Wᵀ``), and the embedding tables are bound zero-copy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import WeightFormatError
from rlx.executable import Executable
from rlx.executable import compile as rlx_compile
from rlx.graph import Graph, Node
from rlx.io.safetensors import SafetensorsFile


@dataclass(frozen=True)
class BertConfig:
    """The fields of a HF ``config.json`` the encoder needs."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    eps: float
    max_pos: int
    vocab: int

    @staticmethod
    def from_json(path: Path) -> BertConfig:
        """Read ``config.json``; WeightFormatError naming a missing key."""
        try:
            c = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise WeightFormatError(f"[bert] {path}: cannot read config ({e})") from e
        if c.get("model_type") != "bert":
            raise WeightFormatError(
                f"[bert] {path}: model_type {c.get('model_type')!r} is not supported "
                "(supported: bert)"
            )
        if c.get("hidden_act", "gelu") != "gelu":
            raise WeightFormatError(f"[bert] {path}: hidden_act {c['hidden_act']!r} unsupported")
        try:
            return BertConfig(
                layers=int(c["num_hidden_layers"]),
                hidden=int(c["hidden_size"]),
                heads=int(c["num_attention_heads"]),
                ffn=int(c["intermediate_size"]),
                eps=float(c.get("layer_norm_eps", 1e-12)),
                max_pos=int(c["max_position_embeddings"]),
                vocab=int(c["vocab_size"]),
            )
        except KeyError as e:
            raise WeightFormatError(f"[bert] {path}: config lacks {e}") from e


class BertEncoder:
    """A loaded BERT sentence encoder. Compiled graphs are cached per length."""

    def __init__(self, weights: Path, device: str = "host") -> None:
        from tokenizers import Tokenizer as HfTokenizer

        self.path = Path(weights)
        root = self.path.parent
        self.config = BertConfig.from_json(root / "config.json")
        self.f = SafetensorsFile(self.path)
        tok_path = root / "tokenizer.json"
        try:
            self.tokenizer = HfTokenizer.from_file(str(tok_path))
        except Exception as e:  # tokenizers raises its own Exception type
            raise WeightFormatError(f"[bert] {tok_path}: cannot load tokenizer ({e})") from e
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.config.max_pos)
        self.device = device
        self._values: dict[str, np.ndarray] = {}
        self._exes: dict[int, Executable] = {}
        self._check_weights()

    # ------------------------------------------------------------ weights
    def _check_weights(self) -> None:
        c = self.config
        need = {
            "embeddings.word_embeddings.weight": (c.vocab, c.hidden),
            "embeddings.position_embeddings.weight": (c.max_pos, c.hidden),
        }
        for name, shape in need.items():
            got = self.f.info(name).shape
            if got != shape:
                raise WeightFormatError(
                    f"[bert] {self.path}: tensor {name!r} has shape {list(got)}, "
                    f"expected {list(shape)}"
                )

    def _param(self, g: Graph, name: str, raw: bool = False) -> Node:
        info = self.f.info(name)
        if info.dtype != "F32":
            raise WeightFormatError(
                f"[bert] {self.path}: tensor {name!r} is {info.dtype}; rlx's BERT reads F32"
            )
        arr = self.f.raw(name) if raw else self.f.tensor(name)
        self._values[name] = arr
        return g.param(name, list(arr.shape), "u8" if raw else "f32")

    def _linear(self, g: Graph, x: Node, name: str) -> Node:
        w = self._param(g, name + ".weight", raw=True)
        n, k = self.f.info(name + ".weight").shape
        y = g.dequant_matmul(x, w, scheme="f32", n=n, k=k, name=name)
        return g.add(y, self._param(g, name + ".bias"), name=name + ".b")

    def _norm(self, g: Graph, x: Node, name: str) -> Node:
        return g.layer_norm(
            x,
            self._param(g, name + ".weight"),
            self._param(g, name + ".bias"),
            eps=self.config.eps,
            name=name,
        )

    # -------------------------------------------------------------- graph
    def build(self, s: int) -> Graph:
        """The encoder graph for one sentence of ``s`` tokens: inputs ``ids``,
        ``pos``, ``types`` (i32 ``[s]``), output ``hidden`` ``[1, s, hidden]``."""
        c = self.config
        g = Graph(f"bert_s{s}")
        ids = g.input("ids", [s], "i32")
        pos = g.input("pos", [s], "i32")
        types = g.input("types", [s], "i32")
        e = g.add(
            g.gather(self._param(g, "embeddings.word_embeddings.weight"), ids),
            g.gather(self._param(g, "embeddings.position_embeddings.weight"), pos),
        )
        e = g.add(e, g.gather(self._param(g, "embeddings.token_type_embeddings.weight"), types))
        x = self._norm(g, g.reshape(e, 1, s, c.hidden), "embeddings.LayerNorm")
        for i in range(c.layers):
            p = f"encoder.layer.{i}."
            q = self._linear(g, x, p + "attention.self.query")
            k = self._linear(g, x, p + "attention.self.key")
            v = self._linear(g, x, p + "attention.self.value")
            a = g.attention(q, k, v, heads=c.heads, mask=None, name=p + "attn")
            o = self._linear(g, a, p + "attention.output.dense")
            x = self._norm(g, g.add(x, o), p + "attention.output.LayerNorm")
            h = g.gelu(self._linear(g, x, p + "intermediate.dense"))
            y = self._linear(g, h, p + "output.dense")
            x = self._norm(g, g.add(x, y), p + "output.LayerNorm")
        g.outputs(x)
        return g

    def _exe(self, s: int) -> Executable:
        exe = self._exes.get(s)
        if exe is None:
            exe = rlx_compile(self.build(s), device=self.device)
            for name in exe.params:
                exe.bind_param(name, self._values[name])
            self._exes[s] = exe
        return exe

    # ---------------------------------------------------------------- API
    def encode(self, text: str) -> list[int]:
        """Token ids with [CLS] / [SEP] (truncated to the position table)."""
        return list(self.tokenizer.encode(text).ids)

    def hidden_states(self, ids: Sequence[int]) -> np.ndarray:
        """Last hidden states ``[len(ids), hidden]`` of one sentence."""
        s = len(ids)
        if s == 0:
            raise WeightFormatError("[bert] empty input")
        out = self._exe(s).run(
            ids=np.asarray(ids, np.int32),
            pos=np.arange(s, dtype=np.int32),
            types=np.zeros(s, np.int32),
        )
        return next(iter(out.values()))[0]

    def embed(self, sentences: Sequence[str] | str) -> np.ndarray:
        """Sentence embeddings ``[n, hidden]``: mean over tokens, L2-normalised."""
        if isinstance(sentences, str):
            sentences = [sentences]
        rows = []
        for text in sentences:
            h = self.hidden_states(self.encode(text)).astype(np.float64)
            m = h.mean(axis=0)
            rows.append(m / max(float(np.linalg.norm(m)), 1e-12))
        return np.asarray(rows, np.float32)


def load_bert(path: Any, device: str = "host") -> BertEncoder:
    """A :class:`BertEncoder` for ``model.safetensors`` at ``path`` (config.json
    and tokenizer.json beside it)."""
    return BertEncoder(Path(path), device=device)
