"""Image preprocessing matching Hugging Face's image processors (their Pillow
backends, ``ViTImageProcessorPil`` / ``ConvNextImageProcessorPil``, the
processor a ResNet checkpoint ships), driven by ``preprocessor_config.json``:

1. decode with Pillow and convert to RGB (grey, grey + alpha, palette, RGBA,
   CMYK all become 3 channels; alpha is dropped);
2. resize with the processor's ``resample`` (Pillow's filter of that number:
   2 bilinear for ViT, 3 bicubic for ConvNeXt / ResNet) to ``size``:
   ``{"height", "width"}`` exactly, or ``{"shortest_edge": s}`` (aspect kept,
   the long edge truncated); with ``crop_pct`` (ConvNeXt) and ``s < 384`` the
   shorter edge goes to ``int(s / crop_pct)`` and the centre ``s × s`` is
   cropped, ``s >= 384`` warps to ``s × s``;
3. an optional centre crop to ``crop_size`` (``do_center_crop``);
4. ``× rescale_factor`` (1/255) and ``(x − image_mean) / image_std``;
5. channels first: ``pixel_values`` ``[n, 3, h, w]`` float32.

Pillow is a dependency of rlx for this (decoding PNG / JPEG / … and the exact
resampling filters HF uses: another resizer would not match its numbers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from rlx.errors import RlxError, ShapeError, UnsupportedOpError, WeightFormatError

#: the file an HF model directory keeps its processor settings in
CONFIG_NAME = "preprocessor_config.json"
#: ``ViTImageProcessor``'s defaults (used when a directory has no config file)
DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


class ImageError(RlxError, ValueError):
    """A file that is not a readable image, or an image array of a bad shape."""


def load_image(path: Union[str, Path]) -> Any:
    """The image at ``path`` as an RGB Pillow image (ImageError if it is not one)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            return im.convert("RGB") if im.mode != "RGB" else im.copy()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        if isinstance(e, FileNotFoundError):
            raise ImageError(f"[image] {path}: no such file") from e
        raise ImageError(f"[image] {path}: not a readable image ({type(e).__name__})") from e


def _to_pil(image: Any) -> Any:
    """A Pillow RGB image from a path, a Pillow image or a uint8 array
    ``[h, w]`` / ``[h, w, 1 | 2 | 3 | 4]`` (channels last)."""
    from PIL import Image

    if isinstance(image, (str, Path)):
        return load_image(image)
    if isinstance(image, Image.Image):
        return image if image.mode == "RGB" else image.convert("RGB")
    a = np.asarray(image)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (2, 3, 4))):
        raise ShapeError(
            f"[image] image array must be [h, w] or [h, w, channels] with 1-4 channels "
            f"(channels last), got shape {list(a.shape)}"
        )
    if a.dtype != np.uint8:
        raise ShapeError(f"[image] image array must be uint8 (0..255), got {a.dtype}")
    mode = {2: "L", 3: {2: "LA", 3: "RGB", 4: "RGBA"}.get(a.shape[-1], "")}[a.ndim]
    return Image.fromarray(np.ascontiguousarray(a), mode).convert("RGB")


@dataclass(frozen=True)
class ImageProcessor:
    """The settings of one ``preprocessor_config.json`` (see the module doc)."""

    size: dict[str, int]
    resample: int
    crop_pct: Optional[float]
    crop_size: Optional[dict[str, int]]
    rescale_factor: Optional[float]
    mean: Optional[tuple[float, ...]]
    std: Optional[tuple[float, ...]]
    do_resize: bool

    @staticmethod
    def from_dict(c: dict[str, Any], where: str = "processor") -> ImageProcessor:
        """From the JSON object of a ``preprocessor_config.json``."""
        try:
            size = {k: int(v) for k, v in dict(c.get("size", DEFAULTS["size"])).items()}
            crop = c.get("crop_size") if c.get("do_center_crop") else None
            mean = tuple(float(v) for v in c.get("image_mean", DEFAULTS["image_mean"]))
            std = tuple(float(v) for v in c.get("image_std", DEFAULTS["image_std"]))
            p = ImageProcessor(
                size=size,
                resample=int(c.get("resample", DEFAULTS["resample"])),
                crop_pct=None if c.get("crop_pct") is None else float(c["crop_pct"]),
                crop_size=None if crop is None else {k: int(v) for k, v in dict(crop).items()},
                rescale_factor=float(c.get("rescale_factor", 1 / 255))
                if c.get("do_rescale", True)
                else None,
                mean=mean if c.get("do_normalize", True) else None,
                std=std if c.get("do_normalize", True) else None,
                do_resize=bool(c.get("do_resize", True)),
            )
        except (TypeError, ValueError) as e:
            raise WeightFormatError(f"[image] {where}: bad processor field ({e})") from e
        if p.do_resize and not ({"height", "width"} <= set(size) or "shortest_edge" in size):
            raise UnsupportedOpError(
                f"[image] {where}: size {size} unsupported (height + width, or shortest_edge)"
            )
        if p.mean is not None and (len(p.mean) != 3 or len(p.std or ()) != 3):
            raise WeightFormatError(f"[image] {where}: image_mean / image_std need 3 values")
        return p

    @staticmethod
    def from_dir(root: Union[str, Path]) -> ImageProcessor:
        """The processor of a model directory: its ``preprocessor_config.json``,
        else ViT's defaults at the ``image_size`` of its ``config.json``."""
        root = Path(root)
        path = root / CONFIG_NAME
        if path.is_file():
            try:
                return ImageProcessor.from_dict(json.loads(path.read_text()), str(path))
            except (OSError, json.JSONDecodeError) as e:
                raise WeightFormatError(f"[image] {path}: cannot read ({e})") from e
        c = dict(DEFAULTS)
        try:
            side = int(json.loads((root / "config.json").read_text()).get("image_size", 224))
            c["size"] = {"height": side, "width": side}
        except (OSError, ValueError, TypeError):
            pass
        return ImageProcessor.from_dict(c, str(root))

    # ------------------------------------------------------------ steps
    def _resize(self, im: Any) -> Any:
        s = self.size
        if "shortest_edge" not in s:
            return im.resize((s["width"], s["height"]), resample=self.resample, reducing_gap=None)
        edge = s["shortest_edge"]
        if self.crop_pct is not None and edge >= 384:  # ConvNeXt: warp, no crop
            return im.resize((edge, edge), resample=self.resample, reducing_gap=None)
        target = edge if self.crop_pct is None else int(edge / self.crop_pct)
        w, h = im.size
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(target * long / short)
        nw, nh = (target, new_long) if w <= h else (new_long, target)
        im = im.resize((nw, nh), resample=self.resample, reducing_gap=None)
        return im if self.crop_pct is None else _center_crop(im, edge, edge)

    def __call__(self, images: Union[Any, Sequence[Any]]) -> np.ndarray:
        """``pixel_values`` ``[n, 3, h, w]`` float32 of one image or a list
        (paths, Pillow images or uint8 arrays channels last)."""
        one = isinstance(images, (str, Path)) or not isinstance(images, (list, tuple))
        rows = []
        for image in [images] if one else images:
            im = _to_pil(image)
            if self.do_resize:
                im = self._resize(im)
            if self.crop_size is not None:
                im = _center_crop(im, self.crop_size["height"], self.crop_size["width"])
            a = np.array(im, np.float32)
            if self.rescale_factor is not None:
                a *= np.float32(self.rescale_factor)
            if self.mean is not None and self.std is not None:
                a -= np.asarray(self.mean, np.float32)
                a /= np.asarray(self.std, np.float32)
            rows.append(a.transpose(2, 0, 1))
        shapes = {r.shape for r in rows}
        if len(shapes) != 1:
            raise ShapeError(f"[image] images of different processed sizes {sorted(shapes)}")
        return np.ascontiguousarray(np.stack(rows), np.float32)


def _center_crop(im: Any, h: int, w: int) -> Any:
    """The centre ``h × w`` of ``im`` (HF: top ``(H − h) // 2``, left ``(W − w) // 2``)."""
    iw, ih = im.size
    if h > ih or w > iw:
        raise UnsupportedOpError(
            f"[image] centre crop {h}x{w} is larger than the resized image {ih}x{iw}"
        )
    top, left = (ih - h) // 2, (iw - w) // 2
    return im.crop((left, top, left + w, top + h))


def top_labels(logits: np.ndarray, id2label: dict[str, str], top: int) -> list[tuple[str, float]]:
    """The ``top`` (label, softmax probability) pairs of one row of logits,
    most probable first (labels from ``id2label``, else ``LABEL_<i>``)."""
    x = np.asarray(logits, np.float64).reshape(-1)
    p = np.exp(x - x.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")[: max(int(top), 1)]
    return [(str(id2label.get(str(int(i)), f"LABEL_{int(i)}")), float(p[i])) for i in order]
