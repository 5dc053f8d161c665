"""Signal ops on the 2N-real-block spectrum layout: FFT, log-mel, Welch peaks."""

from __future__ import annotations

from rlx.node import Node
from rlx.ops._base import GraphBase


class SignalOps(GraphBase):
    """FFT and audio features."""

    def fft(
        self, x: Node, *, inverse: bool = False, norm: str = "backward", name: str = ""
    ) -> Node:
        """Complex FFT along the last axis of a float ``[.., 2n]`` (``[re.., im..]``
        blocks) or of a ``c64`` ``[.., n]``; same shape out. ``norm`` as numpy's
        (``"backward"``, ``"ortho"``, ``"forward"``)."""
        return self._add({"op": "fft", "inverse": inverse, "norm": norm}, [x], name)

    def ifft(self, x: Node, *, norm: str = "backward", name: str = "") -> Node:
        """Inverse of :meth:`fft`."""
        return self.fft(x, inverse=True, norm=norm, name=name)

    def log_mel(self, spec: Node, filters: Node, *, n_fft: int, name: str = "") -> Node:
        """``log(filters @ |spec[:n_bins]|² + 1e-10)``: spec ``[outer, 2·n_fft]``,
        filters ``[n_mels, n_bins]`` → ``[outer, n_mels]``."""
        return self._add({"op": "log_mel", "n_fft": n_fft}, [spec, filters], name)

    def welch_peaks(
        self, spec: Node, *, n_fft: int, n_segments: int, k: int, name: str = ""
    ) -> Node:
        """Indices (stored as f32) of the ``k`` largest bins of the mean one-sided
        power over ``n_segments`` consecutive spectra:
        ``[batch·n_segments, 2·n_fft]`` → ``[batch, k]``."""
        op = {"op": "welch_peaks", "n_fft": n_fft, "n_segments": n_segments, "k": k}
        return self._add(op, [spec], name)
