"""Signal ops on the 2N-real-block spectrum layout: FFT, log-mel, Welch peaks."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from rlx import audio
from rlx.errors import DTypeError, GraphError, ShapeError
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

    def log_mel_spectrogram(
        self,
        waveform: Node,
        *,
        sample_rate: float,
        n_fft: int,
        hop: int,
        n_mels: int,
        window: Union[str, np.ndarray, None] = "hann",
        center: bool = True,
        pad_mode: str = "reflect",
        fmin: float = 0.0,
        fmax: Optional[float] = None,
        mel_scale: str = "slaney",
        mel_norm: Optional[str] = "slaney",
        filters: Optional[np.ndarray] = None,
        power: float = 2.0,
        log: Optional[str] = "ln",
        floor: float = 1e-10,
        floor_mode: str = "add",
        dynamic_range: Optional[float] = None,
        offset: float = 0.0,
        scale: float = 1.0,
        drop_last_frame: bool = False,
        name: str = "",
    ) -> Node:
        """Log-mel spectrogram of a float waveform ``[samples]`` or ``[batch,
        samples]`` → ``[n_mels, frames]`` / ``[batch, n_mels, frames]``.

        Steps (each option names the librosa / Whisper knob it mirrors):

        1. frames of ``n_fft`` samples every ``hop``; with ``center`` the
           signal is first padded by ``n_fft // 2`` (``pad_mode`` ``"reflect"``
           or ``"constant"``); ``drop_last_frame`` drops the last frame
           (Whisper's ``log_spec[:, :-1]``);
        2. times the periodic ``window`` (``"hann"``, ``"hamming"``,
           ``"ones"`` or an array of ``n_fft``), FFT;
        3. ``|X|^power`` of the ``n_fft // 2 + 1`` one-sided bins;
        4. mel filters ``filters [n_mels, bins]`` or, if not given,
           :func:`rlx.audio.mel_filter_bank` with ``fmin``, ``fmax``,
           ``mel_scale`` (``"slaney"`` / ``"htk"``) and ``mel_norm``;
        5. ``log`` of ``mel + floor`` (``floor_mode="add"``) or of
           ``max(mel, floor)`` (``"max"``): ``"ln"``, ``"log10"``, ``"db"``
           (``10·log10``, librosa's ``power_to_db`` with ``ref=1``) or ``None``;
        6. ``dynamic_range``: clamp to ``max − dynamic_range`` per waveform
           (librosa's ``top_db``; Whisper uses 8 on log10);
        7. ``(x + offset) · scale``.

        ``power=2, log="ln", floor_mode="add", floor=1e-10`` is exactly the
        fused :meth:`log_mel` op; other settings use elementwise ops.
        :meth:`whisper_log_mel` presets Whisper's front end."""
        op = "log_mel_spectrogram"
        if not isinstance(waveform, Node):
            raise TypeError(f"[{op}] waveform must be an rlx.Node, got {type(waveform).__name__}")
        if waveform.ndim not in (1, 2):
            raise ShapeError(
                f"[{op}] waveform must be [samples] or [batch, samples], got rank "
                f"{waveform.ndim} {waveform.dtype}{list(waveform.shape)}"
            )
        if waveform.dtype not in ("f32", "f16", "bf16", "f64"):
            raise DTypeError(f"[{op}] waveform must be a float tensor, got {waveform.dtype}")
        for what, v in (("n_fft", n_fft), ("hop", hop), ("n_mels", n_mels)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise GraphError(f"[{op}] {what} must be an int >= 1, got {v!r}")
        if power <= 0 or not np.isfinite(power):
            raise GraphError(f"[{op}] power must be finite and > 0, got {power}")
        if log not in (None, "ln", "log10", "db"):
            raise GraphError(f"[{op}] log must be 'ln', 'log10', 'db' or None, got {log!r}")
        if floor_mode not in ("add", "max") or not floor >= 0:
            raise GraphError(f"[{op}] floor_mode must be 'add' or 'max' and floor >= 0")
        length = self._static(waveform, -1, op, "the waveform length")
        batch = waveform.ndim == 2
        lead = [self._static(waveform, 0, op, "the batch size")] if batch else []
        dt = waveform.dtype
        bins = n_fft // 2 + 1
        if filters is None:
            fb = audio.mel_filter_bank(
                n_fft, n_mels, sample_rate, fmin=fmin, fmax=fmax, mel_scale=mel_scale, norm=mel_norm
            )
        else:
            fb = np.asarray(filters, np.float64)
            if fb.shape != (n_mels, bins):
                raise ShapeError(
                    f"[{op}] filters must be [n_mels, n_fft // 2 + 1] = [{n_mels}, {bins}], "
                    f"got {list(fb.shape)}"
                )
        frames = self._stft_frames(waveform, length, lead, n_fft, hop, center, pad_mode)
        n_frames = audio.frame_count(length, n_fft, hop, center)
        if drop_last_frame:
            if n_frames < 2:
                raise ShapeError(f"[{op}] drop_last_frame needs at least 2 frames, got {n_frames}")
            n_frames -= 1
            frames = self.narrow(frames, -2, 0, n_frames)
        w = self.constant(audio.window(window, n_fft), dtype=dt)
        frames = self.mul(frames, w)
        zeros = self.expand(self.constant(0.0, dtype=dt), lead + [n_frames, n_fft])
        spec = self.fft(self.concat([frames, zeros], -1))
        fused = power == 2.0 and log == "ln" and floor_mode == "add" and floor == 1e-10
        if fused:
            rows = self.reshape(spec, [-1, 2 * n_fft]) if batch else spec
            mel = self.log_mel(rows, self.constant(fb, dtype=dt), n_fft=n_fft)
            if batch:
                mel = self.reshape(mel, lead + [n_frames, n_mels])
        else:
            re = self.narrow(spec, -1, 0, bins)
            im = self.narrow(spec, -1, n_fft, bins)
            p = self.add(self.mul(re, re), self.mul(im, im))
            if power == 1.0:
                p = self.sqrt(p)
            elif power != 2.0:
                p = self.pow(p, power / 2.0)
            mel = self.matmul(p, self.constant(fb.T.copy(), dtype=dt))
            if log is not None:
                mel = self.add(mel, floor) if floor_mode == "add" else self.maximum(mel, floor)
                mel = self.log(mel)
                if log != "ln":
                    mel = self.mul(mel, (10.0 if log == "db" else 1.0) / np.log(10.0))
        if dynamic_range is not None:
            top = self.max(mel, [-2, -1], keep_dims=True)
            mel = self.maximum(mel, self.sub(top, float(dynamic_range)))
        if offset != 0.0:
            mel = self.add(mel, float(offset))
        if scale != 1.0:
            mel = self.mul(mel, float(scale))
        perm = [0, 2, 1] if batch else [1, 0]
        return self.transpose(mel, perm, name=name)

    def whisper_log_mel(
        self, waveform: Node, *, n_mels: int = 80, sample_rate: int = 16000, name: str = ""
    ) -> Node:
        """Whisper's features (transformers' ``WhisperFeatureExtractor``
        without the 30 s padding): n_fft 400, hop 160, periodic Hann, Slaney
        filters to 8 kHz, ``log10(max(mel, 1e-10))`` with the last frame
        dropped, clamped to ``max − 8`` and mapped by ``(x + 4) / 4``."""
        return self.log_mel_spectrogram(
            waveform,
            sample_rate=sample_rate,
            n_fft=400,
            hop=160,
            n_mels=n_mels,
            fmax=8000.0,
            log="log10",
            floor_mode="max",
            dynamic_range=8.0,
            offset=4.0,
            scale=0.25,
            drop_last_frame=True,
            name=name,
        )

    def _stft_frames(
        self,
        wave: Node,
        length: int,
        lead: list[int],
        n_fft: int,
        hop: int,
        center: bool,
        pad_mode: str,
    ) -> Node:
        """``[.., frames, n_fft]`` windows of ``wave`` (not yet weighted):
        pad the ends by gathers, then view the signal as ``[rows, hop]`` and
        concatenate ``ceil(n_fft / hop)`` row-shifted copies."""
        ax = len(lead)
        frames = audio.frame_count(length, n_fft, hop, center)
        if center:
            pad = n_fft // 2
            if pad_mode == "constant":
                z = self.expand(self.constant(0.0, dtype=wave.dtype), lead + [pad])
                left, right = z, z
            else:
                pos = np.concatenate([np.arange(-pad, 0), np.arange(length, length + pad)])
                src = audio.reflect_indices(pos, length)
                left = self.gather_axis(wave, self.constant(src[:pad], dtype="i32"), ax)
                right = self.gather_axis(wave, self.constant(src[pad:], dtype="i32"), ax)
            wave = self.concat([left, wave, right], ax)
            length += 2 * pad
        q = -(-n_fft // hop)
        rows = frames + q - 1
        need = rows * hop
        if need > length:
            z = self.expand(self.constant(0.0, dtype=wave.dtype), lead + [need - length])
            wave = self.concat([wave, z], ax)
        elif need < length:
            wave = self.narrow(wave, ax, 0, need)
        grid = self.reshape(wave, lead + [rows, hop])
        parts = [self.narrow(grid, ax, s, frames) for s in range(q)]
        out = self.concat(parts, -1) if q > 1 else parts[0]
        return self.narrow(out, -1, 0, n_fft) if q * hop != n_fft else out
