"""Whisper speech-to-text from Hugging Face directories
(``WhisperForConditionalGeneration``: ``config.json`` with ``model_type``
``"whisper"``, ``model.safetensors``, ``preprocessor_config.json``,
``generation_config.json``, ``tokenizer.json``): ``rlx.load(dir)`` →
:class:`WhisperModel`.

The graphs follow transformers' ``modeling_whisper``:

* features: :meth:`rlx.Graph.whisper_log_mel` of the waveform padded (or cut)
  to the chunk of ``preprocessor_config.json`` (``n_samples``; 30 s for the
  released models), ``n_mels`` from the config;
* encoder: two 1-D convolutions with exact GELU (kernel 3, padding 1; the
  second of stride 2), written as ``conv2d`` over a ``[1, n_mels, 1, frames]``
  view with ``[out, in, 1, 3]`` kernels; the position table added; pre-LN
  layers (``x + attn(LN(x))``, ``x + fc2(gelu(fc1(LN(x))))``, bidirectional
  attention, no key bias; the attention is the ``attention`` op on Metal and
  explicit batched GEMMs + softmax elsewhere, ``attention``); the
  final LayerNorm;
* decoder (one graph per number of new tokens ``s``): token + learned position
  embeddings, pre-LN layers of causal self-attention, cross-attention on the
  encoder output and the GELU MLP, the final LayerNorm and the logits through
  the tied token embedding. Self-attention keys / values live in states
  ``sk<i>`` / ``sv<i>`` ``[max_target_positions, d]``, written in place
  (``scatter_nd`` at input ``slots``) and read up to input ``kv_len``;
  cross-attention keys / values are states ``ck<i>`` / ``cv<i>``
  ``[max_source_positions, d]``, computed once per utterance by the
  cross-K/V graph (:meth:`WhisperModel.start`) and kept while tokens are
  decoded. Every decoder graph shares one state buffer.

Greedy decoding (:meth:`WhisperModel.generate_ids`) follows transformers'
``generate`` for short-form audio without timestamps: the prompt
``<|startoftranscript|> <|lang|> <|task|> <|notimestamps|>`` (the language
from the argument, else ``forced_decoder_ids``, else detected from the first
step's logits over ``lang_to_id``), ``suppress_tokens`` at every step,
``begin_suppress_tokens`` at the first generated one, stop at
``eos_token_id`` or the position table. Audio longer than one chunk is cut
into consecutive chunks, each transcribed on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from rlx.errors import DTypeError, RlxError, ShapeError, UnsupportedOpError, WeightFormatError
from rlx.executable import Executable
from rlx.graph import Graph, Node
from rlx.io.safetensors import SafetensorsFile
from rlx.models.vision import compile_bound, read_config

#: the ``model_type`` this module loads
MODEL_TYPES = ("whisper",)
#: the sample rate of Whisper's features
SAMPLE_RATE = 16000
_HOP, _N_FFT = 160, 400


@dataclass(frozen=True)
class WhisperConfig:
    """The fields of a HF Whisper ``config.json`` the graphs need."""

    n_mels: int
    d: int
    enc_layers: int
    dec_layers: int
    enc_heads: int
    dec_heads: int
    enc_ffn: int
    dec_ffn: int
    src_pos: int
    tgt_pos: int
    vocab: int
    embed_scale: float
    tied: bool

    @property
    def frames(self) -> int:
        """Feature frames the encoder takes (two per encoder position)."""
        return 2 * self.src_pos

    @staticmethod
    def from_json(path: Path) -> WhisperConfig:
        """Read ``config.json``; WeightFormatError naming a missing or bad key."""
        c = read_config(path, "whisper", MODEL_TYPES)
        if c.get("activation_function", "gelu") != "gelu":
            raise UnsupportedOpError(
                f"[whisper] {path}: activation_function {c['activation_function']!r} "
                "unsupported (gelu only)"
            )
        try:
            d = int(c["d_model"])
            cfg = WhisperConfig(
                n_mels=int(c.get("num_mel_bins", 80)),
                d=d,
                enc_layers=int(c["encoder_layers"]),
                dec_layers=int(c["decoder_layers"]),
                enc_heads=int(c["encoder_attention_heads"]),
                dec_heads=int(c["decoder_attention_heads"]),
                enc_ffn=int(c["encoder_ffn_dim"]),
                dec_ffn=int(c["decoder_ffn_dim"]),
                src_pos=int(c["max_source_positions"]),
                tgt_pos=int(c["max_target_positions"]),
                vocab=int(c["vocab_size"]),
                embed_scale=float(np.sqrt(d)) if c.get("scale_embedding") else 1.0,
                tied=bool(c.get("tie_word_embeddings", True)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightFormatError(f"[whisper] {path}: bad or missing config field ({e})") from e
        for heads in (cfg.enc_heads, cfg.dec_heads):
            if heads <= 0 or cfg.d % heads:
                raise WeightFormatError(
                    f"[whisper] {path}: d_model {cfg.d} is not a multiple of {heads} heads"
                )
        if min(cfg.n_mels, cfg.src_pos, cfg.tgt_pos, cfg.vocab) <= 0:
            raise WeightFormatError(f"[whisper] {path}: sizes must be positive ({cfg})")
        return cfg


def _json(path: Path) -> dict[str, Any]:
    """A JSON object file, ``{}`` when absent; WeightFormatError if unreadable."""
    if not path.is_file():
        return {}
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise WeightFormatError(f"[whisper] {path}: cannot read ({e})") from e
    if not isinstance(out, dict):
        raise WeightFormatError(f"[whisper] {path}: not a JSON object")
    return out


class WhisperModel:
    """A loaded Whisper model; compiled graphs are cached (features, encoder,
    cross K/V, one decoder graph per number of new tokens)."""

    def __init__(
        self, root: Union[str, Path], device: str = "host", attention: str = "auto"
    ) -> None:
        self.root = Path(root)
        if attention == "auto":
            attention = "sdpa" if device.startswith("metal") else "gemm"
        if attention not in ("gemm", "sdpa"):
            raise UnsupportedOpError(
                f"[whisper] attention must be 'auto', 'gemm' or 'sdpa', got {attention!r}"
            )
        #: how the bidirectional attentions run (see :func:`_gemm_attention`)
        self.attention = attention
        self.config = WhisperConfig.from_json(self.root / "config.json")
        #: ``generation_config.json`` over ``config.json`` (token ids, prompt, suppression)
        self.generation = {
            **_json(self.root / "config.json"),
            **_json(self.root / "generation_config.json"),
        }
        pre = _json(self.root / "preprocessor_config.json")
        c = self.config
        self.n_samples = int(pre.get("n_samples", c.frames * _HOP))
        if int(pre.get("feature_size", c.n_mels)) != c.n_mels:
            raise WeightFormatError(
                f"[whisper] {self.root}: preprocessor feature_size {pre['feature_size']} "
                f"differs from num_mel_bins {c.n_mels}"
            )
        if (int(pre.get("hop_length", _HOP)), int(pre.get("n_fft", _N_FFT))) != (_HOP, _N_FFT):
            raise UnsupportedOpError(
                f"[whisper] {self.root}: preprocessor hop_length / n_fft must be 160 / 400"
            )
        if int(pre.get("sampling_rate", SAMPLE_RATE)) != SAMPLE_RATE:
            raise UnsupportedOpError(f"[whisper] {self.root}: sampling_rate must be 16000")
        if self.n_samples != c.frames * _HOP:
            raise WeightFormatError(
                f"[whisper] {self.root}: n_samples {self.n_samples} gives "
                f"{self.n_samples // _HOP} frames; the encoder takes {c.frames}"
            )
        #: the weight files (one, or the shards of large checkpoints)
        self.files = [SafetensorsFile(f) for f in sorted(self.root.glob("*.safetensors"))]
        if not self.files:
            raise WeightFormatError(f"[whisper] {self.root}: no .safetensors file")
        self.device = device
        self._values: dict[str, np.ndarray] = {}
        self._exes: dict[str, Executable] = {}
        self._dec: dict[int, Executable] = {}
        self._tokenizer: Any = None
        #: tokens in the self-attention cache (decoded since :meth:`start`)
        self.n_cached = 0
        self._load_all()

    # ------------------------------------------------------------ weights
    def _get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        f = next((f for f in self.files if name in f), None)
        if f is None:
            raise WeightFormatError(f"[whisper] {self.root}: tensor {name!r} missing")
        a = np.asarray(f.tensor(name), np.float32)
        if a.shape != shape:
            raise WeightFormatError(
                f"[whisper] {f.path}: tensor {name!r} has shape {list(a.shape)}, "
                f"expected {list(shape)}"
            )
        return a

    def _keep(self, name: str, shape: tuple[int, ...]) -> None:
        self._values[name] = self._get(name, shape)

    def _keep_linear(self, name: str, n_out: int, n_in: int, bias: bool = True) -> None:
        """``name.weight`` ``[out, in]`` stored transposed (``name.wT``) [+ ``name.bias``]."""
        self._values[name + ".wT"] = np.ascontiguousarray(
            self._get(name + ".weight", (n_out, n_in)).T
        )
        if bias:
            self._keep(name + ".bias", (n_out,))

    def _keep_norm(self, name: str) -> None:
        self._keep(name + ".weight", (self.config.d,))
        self._keep(name + ".bias", (self.config.d,))

    def _keep_attn(self, p: str) -> None:
        d = self.config.d
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            self._keep_linear(p + proj, d, d, bias=proj != "k_proj")

    def _load_all(self) -> None:
        c = self.config
        d = c.d
        e, m = "model.encoder.", "model.decoder."
        for conv, c_in in (("conv1", c.n_mels), ("conv2", d)):
            w = self._get(e + conv + ".weight", (d, c_in, 3))
            self._values[e + conv + ".weight"] = np.ascontiguousarray(w[:, :, None, :])
            self._keep(e + conv + ".bias", (d,))
        self._keep(e + "embed_positions.weight", (c.src_pos, d))
        for i in range(c.enc_layers):
            p = f"{e}layers.{i}."
            self._keep_attn(p + "self_attn.")
            for norm in ("self_attn_layer_norm", "final_layer_norm"):
                self._keep_norm(p + norm)
            self._keep_linear(p + "fc1", c.enc_ffn, d)
            self._keep_linear(p + "fc2", d, c.enc_ffn)
        self._keep_norm(e + "layer_norm")
        self._keep(m + "embed_tokens.weight", (c.vocab, d))
        self._keep(m + "embed_positions.weight", (c.tgt_pos, d))
        for i in range(c.dec_layers):
            p = f"{m}layers.{i}."
            self._keep_attn(p + "self_attn.")
            self._keep_attn(p + "encoder_attn.")
            for norm in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
                self._keep_norm(p + norm)
            self._keep_linear(p + "fc1", c.dec_ffn, d)
            self._keep_linear(p + "fc2", d, c.dec_ffn)
        self._keep_norm(m + "layer_norm")
        untied = not c.tied and any("proj_out.weight" in f for f in self.files)
        w = (
            self._get("proj_out.weight", (c.vocab, d))
            if untied
            else self._values[m + "embed_tokens.weight"]
        )
        self._values["proj_out.wT"] = np.ascontiguousarray(w.T)

    # -------------------------------------------------------------- graph
    def _p(self, g: Graph, name: str) -> Node:
        return g.param(name, list(self._values[name].shape), "f32")

    def _linear(self, g: Graph, x: Node, name: str) -> Node:
        y = g.matmul(x, self._p(g, name + ".wT"))
        if name + ".bias" not in self._values:
            return y
        return g.add(y, self._p(g, name + ".bias"), name=name)

    def _norm(self, g: Graph, x: Node, name: str) -> Node:
        w, b = self._p(g, name + ".weight"), self._p(g, name + ".bias")
        return g.layer_norm(x, w, b, eps=1e-5, name=name)

    def _mlp(self, g: Graph, x: Node, p: str) -> Node:
        t = self._norm(g, x, p + "final_layer_norm")
        return g.add(x, self._linear(g, g.gelu(self._linear(g, t, p + "fc1")), p + "fc2"))

    def build_features(self) -> Graph:
        """Input ``waveform`` f32 ``[n_samples]`` → log-mel ``[n_mels, frames]``."""
        g = Graph("whisper_features")
        x = g.input("waveform", [self.n_samples], "f32")
        g.outputs(g.whisper_log_mel(x, n_mels=self.config.n_mels, name="features"))
        return g

    def build_encoder(self) -> Graph:
        """Input ``features`` f32 ``[n_mels, frames]`` → ``[1, src_pos, d]``."""
        c = self.config
        e = "model.encoder."
        g = Graph("whisper_encoder")
        x = g.reshape(g.input("features", [c.n_mels, c.frames], "f32"), [1, c.n_mels, 1, c.frames])
        for conv, stride in (("conv1", 1), ("conv2", 2)):
            w, b = self._p(g, e + conv + ".weight"), self._p(g, e + conv + ".bias")
            x = g.gelu(g.conv2d(x, w, b, stride=(1, stride), padding=(0, 1), name=e + conv))
        x = g.transpose(g.reshape(x, [1, c.d, c.src_pos]), [0, 2, 1])
        x = g.add(x, self._p(g, e + "embed_positions.weight"))
        for i in range(c.enc_layers):
            p = f"{e}layers.{i}."
            t = self._norm(g, x, p + "self_attn_layer_norm")
            q, k, v = (self._linear(g, t, f"{p}self_attn.{n}_proj") for n in "qkv")
            if self.attention == "gemm":
                kt, vh = _heads(g, k, c.enc_heads, (0, 2, 3, 1)), _heads(g, v, c.enc_heads)
                a = _gemm_attention(g, q, kt, vh, c.enc_heads)
            else:
                a = g.attention(q, k, v, heads=c.enc_heads, mask=None, name=p + "attn")
            x = g.add(x, self._linear(g, a, p + "self_attn.out_proj"))
            x = self._mlp(g, x, p)
        g.outputs(self._norm(g, x, e + "layer_norm"))
        return g

    def _cross_shapes(self) -> dict[str, list[int]]:
        """Shapes of the cross-attention states: ``[src_pos, d]`` for the
        ``attention`` op, per head ``Kᵀ [heads, dh, src_pos]`` / ``V [heads,
        src_pos, dh]`` for the GEMMs."""
        c = self.config
        if self.attention == "sdpa":
            return {"k": [c.src_pos, c.d], "v": [c.src_pos, c.d]}
        dh = c.d // c.dec_heads
        return {"k": [c.dec_heads, dh, c.src_pos], "v": [c.dec_heads, c.src_pos, dh]}

    def build_cross_kv(self) -> Graph:
        """Input ``encoder_output`` ``[1, src_pos, d]`` → per decoder layer the
        cross-attention keys / values ``ck<i>`` / ``cv<i>`` (:meth:`_cross_shapes`)."""
        c = self.config
        g = Graph("whisper_cross_kv")
        h = g.input("encoder_output", [1, c.src_pos, c.d], "f32")
        shapes, perms = self._cross_shapes(), {"k": (0, 2, 3, 1), "v": (0, 2, 1, 3)}
        outs = []
        for i in range(c.dec_layers):
            p = f"model.decoder.layers.{i}.encoder_attn."
            for kv in "kv":
                y = self._linear(g, h, f"{p}{kv}_proj")
                if self.attention == "gemm":
                    y = _heads(g, y, c.dec_heads, perms[kv])
                outs.append(g.reshape(y, shapes[kv], name=f"c{kv}{i}"))
        g.outputs(*outs)
        return g

    def build_decoder(self, s: int) -> Graph:
        """``s`` new tokens after the cached ones: inputs ``ids`` / ``pos`` i32
        ``[s]``, ``slots`` i32 ``[s, 1]`` (= ``pos``), ``kv_len`` i32 ``[1]``
        (cached + new); states ``sk<i>`` / ``sv<i>`` / ``ck<i>`` / ``cv<i>``;
        output ``logits`` ``[s, vocab]``."""
        c = self.config
        d, m = c.d, "model.decoder."
        g = Graph(f"whisper_decoder_s{s}")
        ids, pos = g.input("ids", [s], "i32"), g.input("pos", [s], "i32")
        slots, kv_len = g.input("slots", [s, 1], "i32"), g.input("kv_len", [1], "i32")
        tok = g.gather(self._p(g, m + "embed_tokens.weight"), ids)
        if c.embed_scale != 1.0:
            tok = g.mul(tok, g.constant(np.float32(c.embed_scale)))
        x = g.reshape(
            g.add(tok, g.gather(self._p(g, m + "embed_positions.weight"), pos)), [1, s, d]
        )
        for i in range(c.dec_layers):
            p = f"{m}layers.{i}."
            t = self._norm(g, x, p + "self_attn_layer_norm")
            q, k, v = (self._linear(g, t, f"{p}self_attn.{n}_proj") for n in "qkv")
            cache = []
            for name, new in ((f"sk{i}", k), (f"sv{i}", v)):
                full = g.scatter_nd(g.state(name, [c.tgt_pos, d]), slots, g.reshape(new, [s, d]))
                cache.append(g.reshape(full, [1, c.tgt_pos, d]))
            a = g.attention(q, cache[0], cache[1], heads=c.dec_heads, mask="causal",
                            kv_len=kv_len, name=p + "self_attn")  # fmt: skip
            x = g.add(x, self._linear(g, a, p + "self_attn.out_proj"))
            t = self._norm(g, x, p + "encoder_attn_layer_norm")
            q = self._linear(g, t, p + "encoder_attn.q_proj")
            ck, cv = (g.state(f"c{n}{i}", shape) for n, shape in self._cross_shapes().items())
            if self.attention == "gemm":
                a = _gemm_attention(g, q, g.reshape(ck, [1, *ck.shape]),
                                    g.reshape(cv, [1, *cv.shape]), c.dec_heads)  # fmt: skip
            else:
                ck, cv = (g.reshape(t, [1, c.src_pos, d]) for t in (ck, cv))
                a = g.attention(q, ck, cv, heads=c.dec_heads, mask=None, name=p + "encoder_attn")
            x = g.add(x, self._linear(g, a, p + "encoder_attn.out_proj"))
            x = self._mlp(g, x, p)
        x = self._norm(g, g.reshape(x, [s, d]), m + "layer_norm")
        g.outputs(g.matmul(x, self._p(g, "proj_out.wT"), name="logits"))
        return g

    def _exe(self, key: str) -> Executable:
        exe = self._exes.get(key)
        if exe is None:
            graph = {"features": self.build_features, "encoder": self.build_encoder,
                     "cross_kv": self.build_cross_kv}[key]()  # fmt: skip
            exe = self._exes[key] = compile_bound(graph, self.device, self._values)
        return exe

    def decoder_graph(self, s: int) -> Executable:
        """The executable for ``s`` new tokens (compiled once; every decoder
        executable shares the first one's state buffer)."""
        exe = self._dec.get(s)
        if exe is None:
            exe = compile_bound(self.build_decoder(s), self.device, self._values)
            if self._dec:
                exe.share_state(next(iter(self._dec.values())))
            self._dec[s] = exe
        return exe

    @property
    def compiled(self) -> dict[str, Executable]:
        """The executables compiled so far, by name (``decoder_s<n>`` per size)."""
        out = dict(self._exes)
        out.update({f"decoder_s{s}": e for s, e in self._dec.items()})
        return out

    # ---------------------------------------------------------------- API
    def features(self, waveform: Any) -> np.ndarray:
        """Log-mel features ``[n_mels, frames]`` of a 16 kHz mono waveform
        (1-D float; padded with zeros or cut to the model's chunk)."""
        x = _waveform(waveform)
        buf = np.zeros(self.n_samples, np.float32)
        n = min(len(x), self.n_samples)
        buf[:n] = x[:n]
        return np.asarray(self._exe("features").run(waveform=buf)["features"])

    def encode(self, features: Any) -> np.ndarray:
        """Encoder output ``[src_pos, d]`` of features ``[n_mels, frames]``
        (or ``[1, n_mels, frames]``)."""
        x = _matrix(features, "features", (self.config.n_mels, self.config.frames))
        out = self._exe("encoder").run(features=x)
        return np.asarray(next(iter(out.values())))[0]

    def start(self, encoder_output: Any) -> None:
        """Begin an utterance: compute the cross-attention keys / values of
        ``encoder_output`` ``[src_pos, d]`` once, keep them in the decoder
        state, and empty the self-attention cache."""
        h = _matrix(encoder_output, "encoder_output", (self.config.src_pos, self.config.d))
        kv = self._exe("cross_kv").run(encoder_output=h[None])
        exe = self.decoder_graph(1)
        for name, value in kv.items():
            exe.set_state(name, value)
        self.n_cached = 0

    def decode(self, token_ids: Any) -> np.ndarray:
        """Logits ``[len(token_ids), vocab]`` of new tokens after the cached
        ones (their keys / values join the cache). Call :meth:`start` first."""
        c = self.config
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ShapeError(
                f"[whisper] token_ids must be a non-empty 1-D integer sequence, "
                f"got shape {list(ids.shape)} of {ids.dtype}"
            )
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise ShapeError(f"[whisper] token_ids must lie in [0, {c.vocab})")
        n, s = self.n_cached, int(ids.size)
        if n + s > c.tgt_pos:
            raise RlxError(
                f"[whisper] {n} cached + {s} new tokens exceed max_target_positions {c.tgt_pos}"
            )
        if not self._dec:
            raise RlxError("[whisper] decode before start(encoder_output)")
        pos = np.arange(n, n + s, dtype=np.int32)
        out = self.decoder_graph(s).run(
            ids=ids.astype(np.int32), pos=pos, slots=pos[:, None],
            kv_len=np.array([n + s], np.int32),
        )  # fmt: skip
        self.n_cached = n + s
        return np.asarray(out["logits"])

    def decoder_logits(self, encoder_output: Any, token_ids: Any) -> np.ndarray:
        """Logits ``[len(token_ids), vocab]`` at every position of
        ``token_ids`` given ``encoder_output`` (a fresh cache)."""
        self.start(encoder_output)
        return self.decode(token_ids)

    # ---------------------------------------------------------- generation
    def _token_id(self, key: str) -> int:
        v = self.generation.get(key)
        if isinstance(v, list):
            v = v[0]
        if not isinstance(v, int):
            raise WeightFormatError(
                f"[whisper] {self.root}: no {key} in generation_config.json or config.json"
            )
        return v

    def _language_id(self, language: str) -> int:
        table = self.generation.get("lang_to_id") or {}
        for key in (language, f"<|{language}|>", f"<|{language.lower()}|>"):
            if key in table:
                return int(table[key])
        raise RlxError(
            f"[transcribe] language {language!r} is not in lang_to_id "
            f"({', '.join(sorted(table)) or 'none'})"
        )

    def prompt(
        self, language: Optional[str] = None, task: Optional[str] = None
    ) -> list[Optional[int]]:
        """The forced decoder prompt (see the module doc); ``None`` as the
        language slot means "detect" (resolved by :meth:`generate_ids`)."""
        gen = self.generation
        tokens: list[Any] = [self._token_id("decoder_start_token_id")]
        forced = dict((int(i), t) for i, t in gen.get("forced_decoder_ids") or [])
        if language is None and task is None:
            k = 1
            while k in forced:
                tokens.append(forced[k])
                k += 1
        if language is not None:
            lang = self._language_id(language)
            tokens[1:2] = [lang]
        elif gen.get("lang_to_id") and (len(tokens) < 2 or tokens[1] is None):
            tokens[1:2] = [None]  # detect
        tasks = gen.get("task_to_id") or {}
        if task is not None:
            if task not in tasks:
                raise RlxError(f"[transcribe] task {task!r} is not in task_to_id {sorted(tasks)}")
            tokens = [t for t in tokens if t not in tasks.values()] + [int(tasks[task])]
        elif language is not None and tasks and not any(t in tasks.values() for t in tokens):
            tokens.append(int(tasks["transcribe"]))
        nts = gen.get("no_timestamps_token_id")
        if nts is not None and tokens[-1] != nts:
            tokens.append(int(nts))
        return tokens

    def generate_ids(
        self,
        waveform: Any,
        language: Optional[str] = None,
        task: Optional[str] = None,
        max_new_tokens: Optional[int] = None,
    ) -> list[int]:
        """Greedy token ids after the prompt for one chunk of audio (without
        the end-of-text token)."""
        return self._generate(self.encode(self.features(waveform)), language, task, max_new_tokens)

    def _generate(
        self, enc: np.ndarray, language: Optional[str], task: Optional[str],
        max_new_tokens: Optional[int],
    ) -> list[int]:  # fmt: skip
        c, gen = self.config, self.generation
        eos = gen.get("eos_token_id")
        eos_ids = set(eos if isinstance(eos, list) else [self._token_id("eos_token_id")])
        prompt: list[Any] = self.prompt(language, task)
        self.start(enc)
        if None in prompt:  # language detection on the first step
            i = prompt.index(None)
            row = self.decode(prompt[:i])[-1]
            langs = np.array(sorted(int(v) for v in gen["lang_to_id"].values()))
            prompt[i] = int(langs[np.argmax(row[langs])])
            self.start(enc)
        limit = c.tgt_pos - len(prompt)
        if max_new_tokens is not None:
            limit = min(limit, int(max_new_tokens))
        suppress = [t for t in gen.get("suppress_tokens") or [] if 0 <= t < c.vocab]
        begin = [t for t in gen.get("begin_suppress_tokens") or [] if 0 <= t < c.vocab]
        row = self.decode(prompt)[-1]
        out: list[int] = []
        while len(out) < limit:
            row = row.copy()
            row[suppress] = -np.inf
            if not out:
                row[begin] = -np.inf
            t = int(np.argmax(row))
            if t in eos_ids:
                break
            out.append(t)
            if len(out) < limit:
                row = self.decode([t])[-1]
        return out

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` of ``tokenizer.json``."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            path = self.root / "tokenizer.json"
            try:
                self._tokenizer = Tokenizer.from_file(str(path))
            except Exception as e:  # tokenizers raises plain Exception
                raise WeightFormatError(f"[whisper] {path}: cannot load tokenizer ({e})") from e
        return self._tokenizer

    def transcribe(
        self,
        waveform: Any,
        language: Optional[str] = None,
        task: Optional[str] = None,
        max_new_tokens: Optional[int] = None,
    ) -> str:
        """The text of a 16 kHz mono waveform (greedy, no timestamps; audio
        longer than one chunk is transcribed chunk by chunk)."""
        x = _waveform(waveform)
        texts = []
        for start in range(0, max(len(x), 1), self.n_samples):
            chunk = x[start : start + self.n_samples]
            ids = self.generate_ids(chunk, language, task, max_new_tokens)
            texts.append(self.tokenizer.decode(ids, skip_special_tokens=True))
        return "".join(texts)


def _heads(g: Graph, x: Node, heads: int, perm: tuple[int, ...] = (0, 2, 1, 3)) -> Node:
    """``x [1, s, heads·dh]`` split per head: ``[1, heads, s, dh]`` (the
    default ``perm``) or ``[1, heads, dh, s]`` (``(0, 2, 3, 1)``, keys
    transposed)."""
    _, s, hd = x.shape
    return g.transpose(g.reshape(x, [1, s, heads, hd // heads]), list(perm))


def _gemm_attention(g: Graph, q: Node, kt: Node, vh: Node, heads: int) -> Node:
    """Bidirectional attention as ``softmax(Q Kᵀ / √dh) V`` in batched GEMMs:
    ``q [1, s, heads·dh]``, ``kt [1, heads, dh, n]``, ``vh [1, heads, n, dh]``
    → ``[1, s, heads·dh]``. The default off Metal for the encoder and the
    cross-attention: with 1500 positions the host's row-at-a-time
    ``attention`` kernel took ~87 % of a 30 s encode, the GEMMs + softmax ~4×
    less in all (bench/whisper.py)."""
    _, s, hd = q.shape
    q = g.mul(q, float(hd // heads) ** -0.5)  # on q: s·hd products, not s·n scores
    scores = g.matmul(_heads(g, q, heads), kt)
    out = g.matmul(g.softmax(scores, -1), vh)
    return g.reshape(g.transpose(out, [0, 2, 1, 3]), [1, s, hd])


def _floats(value: Any, what: str) -> np.ndarray:
    x = np.asarray(value)
    if not np.issubdtype(x.dtype, np.floating):
        raise DTypeError(f"[whisper] {what} must be floating point, got {x.dtype}")
    return x.astype(np.float32, copy=False)


def _matrix(value: Any, what: str, shape: tuple[int, int]) -> np.ndarray:
    """``value`` ``shape`` (or ``[1, *shape]``) as contiguous float32;
    ShapeError / DTypeError naming ``what``."""
    x = _floats(value, what)
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.shape != shape:
        raise ShapeError(
            f"[whisper] {what} must be [{shape[0]}, {shape[1]}], got shape {list(np.shape(value))}"
        )
    return np.ascontiguousarray(x)


def _waveform(waveform: Any) -> np.ndarray:
    """A 1-D float waveform as float32; ShapeError / DTypeError naming it."""
    x = np.asarray(waveform)
    if x.ndim != 1:
        raise ShapeError(
            f"[whisper] waveform must be 1-D [samples] (16 kHz mono), got shape {list(x.shape)}"
        )
    return np.ascontiguousarray(_floats(x, "waveform"))


def load(root: Path, device: str = "host") -> WhisperModel:
    """The model of an HF Whisper directory (the registry's entry point)."""
    return WhisperModel(root, device=device)


def transcribe_file(
    model: Union[str, Path],
    audio: Union[str, Path],
    *,
    language: Optional[str] = None,
    task: Optional[str] = None,
    max_new_tokens: Optional[int] = None,
    device: str = "host",
) -> str:
    """The text of an audio file (``rlx transcribe``): read, mixed to mono,
    resampled to 16 kHz (:mod:`rlx.audio_io`), transcribed by the Whisper
    directory ``model``."""
    from rlx.audio_io import load_audio

    root = Path(model)
    if not (root / "config.json").is_file():
        raise WeightFormatError(f"[transcribe] {root}: not a model directory (no config.json)")
    wave = load_audio(audio, SAMPLE_RATE)
    return WhisperModel(root, device=device).transcribe(wave, language, task, max_new_tokens)
