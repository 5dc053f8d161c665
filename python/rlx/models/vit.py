"""ViT image classifiers from Hugging Face directories
(``ViTForImageClassification``: ``config.json`` with ``model_type`` ``"vit"``
+ ``model.safetensors``): ``rlx.load(dir)`` → :class:`ViTClassifier` with
``.logits(pixel_values)``.

The graph follows transformers' ``modeling_vit``: a patch embedding (a conv
of kernel and stride ``patch_size`` with bias, flattened to ``[n, patches,
hidden]``), the CLS token in front, learned position embeddings added, then
pre-LayerNorm encoder layers (``x + attn(LN(x))``, ``x + MLP(LN(x))`` with a
bidirectional multi-head attention without mask and an exact-GELU MLP), the
final LayerNorm and the linear classifier on the CLS row. The image size must
be the config's ``image_size`` (the position table is not interpolated).

The encoder is the one of :mod:`rlx.models.bert` in pre-norm order, built
from the same graph ops (``attention(mask=None)``, ``layer_norm``, ``gelu``);
projections are ``x @ Wᵀ + b`` with ``Wᵀ`` transposed once at load time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from rlx.errors import ShapeError, UnsupportedOpError, WeightFormatError
from rlx.executable import Executable
from rlx.graph import Graph, Node
from rlx.models.vision import compile_bound, pixel_batch, read_config, single_safetensors

#: the ``model_type`` this module loads
MODEL_TYPES = ("vit",)


@dataclass(frozen=True)
class ViTConfig:
    """The fields of a HF ViT ``config.json`` the graph needs."""

    image: int
    patch: int
    channels: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    eps: float
    labels: int

    @property
    def patches(self) -> int:
        """Patches per image (``(image / patch)²``)."""
        return (self.image // self.patch) ** 2

    @staticmethod
    def from_json(path: Path) -> ViTConfig:
        """Read ``config.json``; WeightFormatError naming a missing or bad key."""
        c = read_config(path, "vit", MODEL_TYPES)
        if c.get("hidden_act", "gelu") != "gelu":
            raise UnsupportedOpError(
                f"[vit] {path}: hidden_act {c['hidden_act']!r} unsupported (gelu only)"
            )
        if c.get("qkv_bias", True) is not True:
            raise UnsupportedOpError(f"[vit] {path}: qkv_bias false is not supported")
        try:
            labels = c.get("num_labels") or len(c["id2label"])
            cfg = ViTConfig(
                image=int(c["image_size"]),
                patch=int(c["patch_size"]),
                channels=int(c.get("num_channels", 3)),
                hidden=int(c["hidden_size"]),
                layers=int(c["num_hidden_layers"]),
                heads=int(c["num_attention_heads"]),
                ffn=int(c["intermediate_size"]),
                eps=float(c.get("layer_norm_eps", 1e-12)),
                labels=int(labels),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightFormatError(f"[vit] {path}: bad or missing config field ({e})") from e
        if cfg.patch <= 0 or cfg.image % cfg.patch or cfg.heads <= 0 or cfg.hidden % cfg.heads:
            raise WeightFormatError(
                f"[vit] {path}: image_size {cfg.image} must be a multiple of patch_size "
                f"{cfg.patch} and hidden_size {cfg.hidden} of num_attention_heads {cfg.heads}"
            )
        return cfg


class ViTClassifier:
    """A loaded ViT classifier; compiled graphs are cached per batch size."""

    def __init__(self, root: Union[str, Path], device: str = "host") -> None:
        self.root = Path(root)
        self.config = ViTConfig.from_json(self.root / "config.json")
        self.f = single_safetensors(self.root, "vit")
        self.device = device
        self._values: dict[str, np.ndarray] = {}
        self._exes: dict[int, Executable] = {}
        self._load_all()

    # ------------------------------------------------------------ weights
    def _get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.f:
            raise WeightFormatError(f"[vit] {self.f.path}: tensor {name!r} missing")
        a = np.asarray(self.f.tensor(name), np.float32)
        if a.shape != shape:
            raise WeightFormatError(
                f"[vit] {self.f.path}: tensor {name!r} has shape {list(a.shape)}, "
                f"expected {list(shape)}"
            )
        return a

    def _keep(self, name: str, shape: tuple[int, ...]) -> None:
        self._values[name] = self._get(name, shape)

    def _keep_linear(self, name: str, n_out: int, n_in: int) -> None:
        """``name.weight`` ``[out, in]`` stored transposed (``name.wT``) + ``name.bias``."""
        w = self._get(name + ".weight", (n_out, n_in))
        self._values[name + ".wT"] = np.ascontiguousarray(w.T)
        self._keep(name + ".bias", (n_out,))

    def _load_all(self) -> None:
        c = self.config
        h = c.hidden
        e = "vit.embeddings."
        self._keep(e + "cls_token", (1, 1, h))
        self._keep(e + "position_embeddings", (1, c.patches + 1, h))
        proj = e + "patch_embeddings.projection."
        self._keep(proj + "weight", (h, c.channels, c.patch, c.patch))
        self._keep(proj + "bias", (h,))
        for i in range(c.layers):
            p = f"vit.encoder.layer.{i}."
            for norm in ("layernorm_before", "layernorm_after"):
                self._keep(p + norm + ".weight", (h,))
                self._keep(p + norm + ".bias", (h,))
            for qkv in ("query", "key", "value"):
                self._keep_linear(p + "attention.attention." + qkv, h, h)
            self._keep_linear(p + "attention.output.dense", h, h)
            self._keep_linear(p + "intermediate.dense", c.ffn, h)
            self._keep_linear(p + "output.dense", h, c.ffn)
        self._keep("vit.layernorm.weight", (h,))
        self._keep("vit.layernorm.bias", (h,))
        self._keep_linear("classifier", c.labels, h)

    # -------------------------------------------------------------- graph
    def _p(self, g: Graph, name: str) -> Node:
        return g.param(name, list(self._values[name].shape), "f32")

    def _linear(self, g: Graph, x: Node, name: str) -> Node:
        y = g.matmul(x, self._p(g, name + ".wT"))
        return g.add(y, self._p(g, name + ".bias"), name=name)

    def _norm(self, g: Graph, x: Node, name: str) -> Node:
        w, b = self._p(g, name + ".weight"), self._p(g, name + ".bias")
        return g.layer_norm(x, w, b, eps=self.config.eps, name=name)

    def build(self, n: int) -> Graph:
        """The classifier graph for ``pixel_values`` ``[n, channels, image, image]``:
        output ``logits`` ``[n, labels]``."""
        c = self.config
        h = c.hidden
        g = Graph(f"vit_{n}")
        x = g.input("pixel_values", [n, c.channels, c.image, c.image], "f32")
        proj = "vit.embeddings.patch_embeddings.projection"
        y = g.conv2d(
            x, self._p(g, proj + ".weight"), self._p(g, proj + ".bias"), stride=c.patch, name=proj
        )
        patches = g.transpose(g.reshape(y, [n, h, c.patches]), [0, 2, 1])
        cls = g.expand(self._p(g, "vit.embeddings.cls_token"), [n, 1, h])
        x = g.add(
            g.concat([cls, patches], axis=1), self._p(g, "vit.embeddings.position_embeddings")
        )
        for i in range(c.layers):
            p = f"vit.encoder.layer.{i}."
            t = self._norm(g, x, p + "layernorm_before")
            q, k, v = (self._linear(g, t, p + "attention.attention." + n_) for n_ in
                       ("query", "key", "value"))  # fmt: skip
            a = g.attention(q, k, v, heads=c.heads, mask=None, name=p + "attn")
            x = g.add(x, self._linear(g, a, p + "attention.output.dense"))
            t = self._norm(g, x, p + "layernorm_after")
            t = g.gelu(self._linear(g, t, p + "intermediate.dense"))
            x = g.add(x, self._linear(g, t, p + "output.dense"))
        first = g.reshape(g.narrow(x, 1, 0, 1), [n, h])
        cls_out = self._norm(g, first, "vit.layernorm")  # LayerNorm is per row: CLS only
        logits = self._linear(g, cls_out, "classifier")
        g.outputs(g.reshape(logits, [n, c.labels], name="logits"))
        return g

    def compiled(self, n: int) -> Executable:
        """The executable for a batch of ``n`` images (compiled once, params bound)."""
        exe = self._exes.get(n)
        if exe is None:
            exe = self._exes[n] = compile_bound(self.build(n), self.device, self._values)
        return exe

    # ---------------------------------------------------------------- API
    def logits(self, pixel_values: Any) -> np.ndarray:
        """Class logits ``[n, labels]`` of ``pixel_values`` ``[n, channels, image,
        image]`` (or one image ``[channels, image, image]``), float32."""
        c = self.config
        x = pixel_batch(pixel_values, c.channels, "vit")
        if x.shape[2:] != (c.image, c.image):
            raise ShapeError(
                f"[vit] pixel_values is {x.shape[2]}x{x.shape[3]} (dims 2, 3); the model "
                f"takes {c.image}x{c.image} (resize with rlx.models.image_processor)"
            )
        out = self.compiled(int(x.shape[0])).run(pixel_values=x)
        return np.asarray(next(iter(out.values())))


def load(root: Path, device: str = "host") -> ViTClassifier:
    """The classifier of an HF ViT directory (the registry's entry point)."""
    return ViTClassifier(root, device=device)
