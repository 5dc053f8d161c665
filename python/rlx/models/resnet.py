"""ResNet image classifiers from Hugging Face directories
(``ResNetForImageClassification``: ``config.json`` with ``model_type``
``"resnet"`` + ``model.safetensors``): ``rlx.load(dir)`` →
:class:`ResNetClassifier` with ``.logits(pixel_values)``.

The graph follows transformers' ``modeling_resnet``: a 7×7 stride-2 stem conv
+ ReLU and a 3×3 stride-2 max pool, then stages of bottleneck (1×1 reduce by
4, 3×3, 1×1 expand) or basic (3×3, 3×3) layers with a residual add and ReLU
(the first layer of a stage strides by 2, except in the first stage unless
``downsample_in_first_stage``, and projects the residual with a 1×1 conv when
the channels or the size change), a global average pool and the linear
classifier. Convs use padding ``kernel // 2`` and no bias.

BatchNorm runs in eval mode, so it is folded into the conv before it at load
time (in float64, stored as float32): with ``s = γ / √(running_var + ε)``,
``W' = W·s`` per output channel and bias ``β − running_mean·s``; the graph has
convs with a bias and no norm.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.executable import Executable
from rlx.graph import Graph, Node
from rlx.models.vision import compile_bound, pixel_batch, read_config, single_safetensors

#: the ``model_type`` this module loads
MODEL_TYPES = ("resnet",)
#: BatchNorm epsilon (``nn.BatchNorm2d``'s default; transformers' ResNet keeps it)
BN_EPS = 1e-5


@dataclass(frozen=True)
class ResNetConfig:
    """The fields of a HF ResNet ``config.json`` the graph needs."""

    channels: int
    embedding: int
    hidden_sizes: tuple[int, ...]
    depths: tuple[int, ...]
    bottleneck: bool
    downsample_first: bool
    downsample_in_bottleneck: bool
    labels: int

    @staticmethod
    def from_json(path: Path) -> ResNetConfig:
        """Read ``config.json``; WeightFormatError naming a missing or bad key."""
        c = read_config(path, "resnet", MODEL_TYPES)
        if c.get("hidden_act", "relu") != "relu":
            raise UnsupportedOpError(
                f"[resnet] {path}: hidden_act {c['hidden_act']!r} unsupported (relu only)"
            )
        lt = c.get("layer_type", "bottleneck")
        if lt not in ("bottleneck", "basic"):
            raise WeightFormatError(f"[resnet] {path}: layer_type {lt!r} unsupported")
        try:
            labels = c.get("num_labels") or len(c["id2label"])
            cfg = ResNetConfig(
                channels=int(c.get("num_channels", 3)),
                embedding=int(c["embedding_size"]),
                hidden_sizes=tuple(int(v) for v in c["hidden_sizes"]),
                depths=tuple(int(v) for v in c["depths"]),
                bottleneck=lt == "bottleneck",
                downsample_first=bool(c.get("downsample_in_first_stage", False)),
                downsample_in_bottleneck=bool(c.get("downsample_in_bottleneck", False)),
                labels=int(labels),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightFormatError(f"[resnet] {path}: bad or missing config field ({e})") from e
        if len(cfg.hidden_sizes) != len(cfg.depths) or not cfg.depths:
            raise WeightFormatError(
                f"[resnet] {path}: hidden_sizes {list(cfg.hidden_sizes)} and depths "
                f"{list(cfg.depths)} must be non-empty and of one length"
            )
        return cfg


class ResNetClassifier:
    """A loaded ResNet classifier; compiled graphs are cached per input shape."""

    def __init__(self, root: Union[str, Path], device: str = "host") -> None:
        self.root = Path(root)
        self.config = ResNetConfig.from_json(self.root / "config.json")
        self.f = single_safetensors(self.root, "resnet")
        self.device = device
        self._values: dict[str, np.ndarray] = {}
        self._exes: dict[tuple[int, ...], Executable] = {}
        self._fold_all()

    # ------------------------------------------------------------ weights
    def _get(self, name: str) -> np.ndarray:
        if name not in self.f:
            raise WeightFormatError(f"[resnet] {self.f.path}: tensor {name!r} missing")
        return np.asarray(self.f.tensor(name), np.float64)

    def _fold(self, prefix: str) -> None:
        """``prefix.convolution`` + ``prefix.normalization`` → folded weight and bias."""
        w = self._get(prefix + ".convolution.weight")
        bn = prefix + ".normalization."
        gamma, beta = self._get(bn + "weight"), self._get(bn + "bias")
        mean, var = self._get(bn + "running_mean"), self._get(bn + "running_var")
        if w.ndim != 4 or not (gamma.shape == beta.shape == mean.shape == var.shape == w.shape[:1]):
            raise WeightFormatError(
                f"[resnet] {self.f.path}: {prefix}: conv weight {list(w.shape)} and "
                f"BatchNorm [{gamma.shape[0]}] do not match"
            )
        s = gamma / np.sqrt(var + BN_EPS)
        self._values[prefix + ".w"] = (w * s[:, None, None, None]).astype(np.float32)
        self._values[prefix + ".b"] = (beta - mean * s).astype(np.float32)

    def _layers(self) -> list[tuple[str, int, int, int]]:
        """Each residual layer: (name prefix, in channels, out channels, stride)."""
        c = self.config
        out = []
        for s, (oc, depth) in enumerate(zip(c.hidden_sizes, c.depths)):
            ic = c.embedding if s == 0 else c.hidden_sizes[s - 1]
            stride = 2 if (s > 0 or c.downsample_first) else 1
            for j in range(depth):
                p = f"resnet.encoder.stages.{s}.layers.{j}"
                out.append((p, ic if j == 0 else oc, oc, stride if j == 0 else 1))
        return out

    def _fold_all(self) -> None:
        self._fold("resnet.embedder.embedder")
        for p, ic, oc, stride in self._layers():
            if ic != oc or stride != 1:
                self._fold(p + ".shortcut")
            for k in range(3 if self.config.bottleneck else 2):
                self._fold(f"{p}.layer.{k}")
        w = self._get("classifier.1.weight")
        b = self._get("classifier.1.bias")
        last = self.config.hidden_sizes[-1]
        if w.shape != (self.config.labels, last) or b.shape != (self.config.labels,):
            raise WeightFormatError(
                f"[resnet] {self.f.path}: classifier {list(w.shape)} / {list(b.shape)}, "
                f"expected [{self.config.labels}, {last}] / [{self.config.labels}]"
            )
        self._values["classifier.wT"] = np.ascontiguousarray(w.T, np.float32)
        self._values["classifier.b"] = b.astype(np.float32)

    # -------------------------------------------------------------- graph
    def _conv(self, g: Graph, x: Node, prefix: str, stride: int, relu: bool) -> Node:
        w = self._values[prefix + ".w"]
        k = w.shape[2]
        y = g.conv2d(
            x,
            g.param(prefix + ".w", list(w.shape), "f32"),
            g.param(prefix + ".b", [w.shape[0]], "f32"),
            stride=stride,
            padding=k // 2,
            name=prefix,
        )
        return g.relu(y) if relu else y

    def build(self, n: int, h: int, w: int) -> Graph:
        """The classifier graph for ``pixel_values`` ``[n, channels, h, w]``:
        output ``logits`` ``[n, labels]``."""
        c = self.config
        g = Graph(f"resnet_{n}x{h}x{w}")
        x = g.input("pixel_values", [n, c.channels, h, w], "f32")
        x = self._conv(g, x, "resnet.embedder.embedder", 2, True)
        x = g.max_pool2d(x, 3, stride=2, padding=1)
        dib = c.downsample_in_bottleneck
        for p, ic, oc, stride in self._layers():
            res = x
            if ic != oc or stride != 1:
                res = self._conv(g, x, p + ".shortcut", stride, False)
            if c.bottleneck:
                y = self._conv(g, x, p + ".layer.0", stride if dib else 1, True)
                y = self._conv(g, y, p + ".layer.1", 1 if dib else stride, True)
                y = self._conv(g, y, p + ".layer.2", 1, False)
            else:
                y = self._conv(g, x, p + ".layer.0", stride, True)
                y = self._conv(g, y, p + ".layer.1", 1, False)
            x = g.relu(g.add(y, res))
        pooled = g.mean(x, axis=(2, 3))
        wt = self._values["classifier.wT"]
        logits = g.add(
            g.matmul(pooled, g.param("classifier.wT", list(wt.shape), "f32")),
            g.param("classifier.b", [c.labels], "f32"),
            name="logits",
        )
        g.outputs(logits)
        return g

    def compiled(self, n: int, h: int, w: int) -> Executable:
        """The executable for one input shape (compiled once, params bound)."""
        key = (n, h, w)
        exe = self._exes.get(key)
        if exe is None:
            exe = self._exes[key] = compile_bound(self.build(n, h, w), self.device, self._values)
        return exe

    # ---------------------------------------------------------------- API
    def logits(self, pixel_values: Any) -> np.ndarray:
        """Class logits ``[n, labels]`` of ``pixel_values`` ``[n, channels, h, w]``
        (or one image ``[channels, h, w]``), float32."""
        x = pixel_batch(pixel_values, self.config.channels, "resnet")
        n, _, h, w = (int(v) for v in x.shape)
        out = self.compiled(n, h, w).run(pixel_values=x)
        return np.asarray(next(iter(out.values())))


def load(root: Path, device: str = "host") -> ResNetClassifier:
    """The classifier of an HF ResNet directory (the registry's entry point)."""
    return ResNetClassifier(root, device=device)
