"""LoRA fine-tuning of a Llama-style GGUF / HF decoder as one compiled step.

The base weights stay as stored (quantised GGUF blocks multiplied by
``dequant_mat_mul``) and frozen; each targeted projection (default: the
attention's q and v, rank 8) gets ``y += (x @ Aᵀ) @ Bᵀ · alpha/rank`` with
``A [r, k]`` and ``B [n, r]`` ``State`` leaves (peft's layout and init:
``A`` uniform in ``±1/√k``, ``B`` zero). :func:`rlx.optim.train_step`
appends the backward and the optimizer update, so one
``Executable.run`` is one step: forward over ``seq`` tokens, the loss
(mean next-token cross-entropy), the gradients of the adapters only, and
the in-place update of the adapters and the optimizer moments.

The frozen quantised matmuls are differentiated through their input only
(``dx = dy @ W``). By default (``dense_backward=False``) that product is
``dequant_mat_mul_t``: ``dy @ dequant(W)`` computed straight from the
packed GGUF blocks (strips of W decoded a panel at a time into small
thread-local buffers), so the weights stay quantised in memory and cost the
same multiply-adds as a dense matmul. ``dense_backward=True`` instead reads
an f32 copy of each weight dequantised once at load: 4 bytes per weight
more memory (SmolLM2-135M: ~510 MiB next to its ~92 MiB of Q4_1), one
plain matmul per weight and step.

Attention is written as batched matmuls and a softmax by default
(``matmul_attention=True``): its backward is then matmuls too. The fused
``attention`` op's backward (``attention_backward``, one call per operand
dq / dk / dv, each recomputing the probabilities) runs a native f32 kernel
(query tiles of 32 rows, GEMM micro-kernels): on SmolLM2's shapes at 64
causal tokens 0.31 / 0.31 / 0.24 ms per call (the former scalar f64
kernel: 3.9 / 4.0 / 2.6 ms), at 256 tokens ~4 / 4 / 3 ms (was 135–140 /
88 ms). A whole 64-token step now takes the same time both ways (paired
fused / matmul step ratio 1.000–1.016 over 4 × 30 alternating steps,
~0.6–0.9 s a step on the loaded 2-core machine) and the fused form 6–8 %
more at 256 tokens (it multiplies about as many scores: three recomputes
against the matmul form's full, unmasked products), so the matmul form
stays the default; the fused one needs less memory (arena 80 vs 90 MiB
at 64 tokens, 313 vs 403 MiB at 256: no ``[heads, s, s]`` scores or
probabilities are kept for the backward).

The token embedding is frozen too, so its rows are looked up in numpy and
fed as the ``embeds`` input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from rlx.errors import RlxError, UnsupportedOpError
from rlx.graph import Graph
from rlx.node import Node
from rlx.optim import STEP_STATE, AdamW, Optimizer, Schedule, train_step
from rlx.train.checkpoint import load_checkpoint, save_checkpoint

#: the projections a target name selects (GGUF tensor suffixes)
TARGETS = {
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "o": "attn_output",
    "gate": "ffn_gate",
    "up": "ffn_up",
    "down": "ffn_down",
}


@dataclass(frozen=True)
class LoraConfig:
    """Adapter rank, scale numerator (``alpha / rank`` multiplies the
    update), targeted projections (:data:`TARGETS` keys) and init seed."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q", "v")
    seed: int = 0


def _resolve(path_or_name: Union[str, Path]) -> Any:
    from rlx.io.models import MODELS, ensure_model

    if isinstance(path_or_name, str) and path_or_name in MODELS:
        return ensure_model(path_or_name)
    return Path(path_or_name)


class LoraTrainer:
    """A compiled LoRA training step for the decoder at ``path_or_name`` (a
    GGUF file, an HF directory or a packaged name such as ``"smollm2"``) on
    windows of ``seq`` tokens (``seq + 1`` ids per micro-batch).

    ``schedule`` scales the optimizer's learning rate per update
    (:mod:`rlx.optim.schedule`); with ``accumulate = k`` one :meth:`step`
    takes ``k`` windows, runs the compiled step once per window and applies
    one update with the mean of their gradients (= one step over the ``k``
    windows together)."""

    def __init__(
        self,
        path_or_name: Union[str, Path],
        seq: int,
        lora: LoraConfig = LoraConfig(),
        optimizer: Optional[Optimizer] = None,
        *,
        clip_norm: Optional[float] = 1.0,
        dense_backward: bool = False,
        matmul_attention: bool = True,
        schedule: Optional[Schedule] = None,
        accumulate: int = 1,
        device: str = "host",
    ) -> None:
        from rlx.executable import compile as rlx_compile
        from rlx.models.base import ArchSpec, Weights
        from rlx.models.registry import open_model

        if seq < 1:
            raise RlxError(f"[lora] seq must be >= 1, got {seq}")
        if lora.rank < 1:
            raise RlxError(f"[lora] rank must be >= 1, got {lora.rank}")
        bad = [t for t in lora.targets if t not in TARGETS]
        if bad:
            raise RlxError(f"[lora] unknown target {bad[0]!r}; expected some of {sorted(TARGETS)}")
        src, cfg, spec, tok = open_model(_resolve(path_or_name))
        plain = ArchSpec()
        if (
            any(m != "attention" for m in (cfg.mixers or []))
            or cfg.moe is not None
            or any(cfg.windows)
            or spec != plain
        ):
            raise UnsupportedOpError(
                f"[lora] {cfg.arch}: only the plain Llama block (GQA attention, SwiGLU "
                "MLP, no biases / qk-norms / windows / experts) is built for training"
            )
        self.config, self.tokenizer, self.seq, self.lora = cfg, tok, seq, lora
        self.schedule, self.accumulate = schedule, accumulate
        self.optimizer = optimizer if optimizer is not None else AdamW(lr=1e-3, weight_decay=0.0)
        self.weights = w = Weights(src)
        self.dense_backward = dense_backward
        self.matmul_attention = matmul_attention
        self._causal: Optional[Node] = None
        self.dense: dict[str, np.ndarray] = {}
        self.adapters: list[str] = []
        self._adapter_nodes: list[Node] = []
        self.graph = g = Graph("lora_step")
        self._dense_nodes: dict[Node, Node] = {}
        loss = self._forward(g)
        #: the loss node: the forward is nodes 0..loss_id (:mod:`rlx.train.saved`)
        self.loss_id = loss.id
        self.states = train_step(
            g,
            loss,
            self._adapter_nodes,
            self.optimizer,
            clip_norm=clip_norm,
            dense_weights=self._dense_nodes,
            schedule=schedule,
            accumulate=accumulate,
        )
        self.exe = rlx_compile(g, device=device)
        for name in self.exe.params:
            arr = self.dense[name] if name in self.dense else w.values[name]
            bind = getattr(self.exe, "bind_param", None)
            (bind or self.exe.set_param)(name, arr)
        self.init_adapters()
        #: completed steps (what a checkpoint resumes from)
        self.step_count = 0

    # ------------------------------------------------------------ graph
    def _linear(self, g: Graph, x: Node, name: str, lora: bool, grad_x: bool) -> Node:
        y = self.weights.linear(g, x, name)
        if grad_x and self.dense_backward:
            wq = y.inputs[1]
            if wq.op == "param" and wq not in self._dense_nodes:
                n, k = y.attrs["n"], y.attrs["k"]
                dname = f"{name}.dense"
                self.dense[dname] = np.ascontiguousarray(
                    self.weights.embedding_rows(name, np.arange(n)), np.float32
                )
                self._dense_nodes[wq] = g.param(dname, [n, k])
        if not lora:
            return y
        r, k, n = self.lora.rank, y.attrs["k"], y.attrs["n"]
        stem = name.removesuffix(".weight")
        a = g.state(f"{stem}.lora_a", [r, k])
        b = g.state(f"{stem}.lora_b", [n, r])
        self.adapters += [a.name, b.name]
        self._adapter_nodes += [a, b]
        low = g.matmul(g.matmul(x, g.transpose(a, [1, 0])), g.transpose(b, [1, 0]))
        return y + low * (self.lora.alpha / r)

    def _forward(self, g: Graph) -> Node:
        cfg, w, s = self.config, self.weights, self.seq
        targets = {TARGETS[t] for t in self.lora.targets}
        h = g.input("embeds", [1, s, cfg.hidden])
        labels = g.input("targets", [s], "i32")
        pos = np.arange(s, dtype=np.float64)[:, None]
        rope = {}
        for key in cfg.rope_groups():
            base, sc = key
            ang = pos * sc.inv_freq(base, cfg.rope_dims)[None, :]
            rope[key] = (
                g.constant(np.cos(ang).astype(np.float32)),
                g.constant(np.sin(ang).astype(np.float32)),
            )
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            below = i > 0  # layer 0's input (the embeddings) carries no gradient

            def lin(x: Node, part: str, gx: bool, i: int = i) -> Node:
                return self._linear(g, x, f"blk.{i}.{part}.weight", part in targets, gx)

            x = g.rms_norm(h, w.vector(g, p + "attn_norm.weight"), eps=cfg.eps)
            q, k, v = lin(x, "attn_q", below), lin(x, "attn_k", below), lin(x, "attn_v", below)
            cos, sin = rope[cfg.rope_key(i)]
            q, k = (
                g.rope(t, cos, sin, head_dim=cfg.head_dim, n_rot=cfg.rope_dims, kind=cfg.rope_kind)
                for t in (q, k)
            )
            a = self._attention(g, q, k, v)
            h = h + lin(a, "attn_output", True)
            x = g.rms_norm(h, w.vector(g, p + "ffn_norm.weight"), eps=cfg.eps)
            up = g.silu(lin(x, "ffn_gate", True)) * lin(x, "ffn_up", True)
            h = h + lin(up, "ffn_down", True)
        x = g.rms_norm(h, w.vector(g, "output_norm.weight"), eps=cfg.eps)
        out = "token_embd.weight" if cfg.tied_output else "output.weight"
        logits = self._linear(g, g.reshape(x, [s, cfg.hidden]), out, False, True)
        return g.mean(g.softmax_cross_entropy(logits, labels))

    def _attention(self, g: Graph, q: Node, k: Node, v: Node) -> Node:
        """Causal GQA attention of ``[1, s, heads·d]`` q and ``[1, s, kv·d]``
        k / v: the fused op (its backward the ``attention_backward`` op), or
        with ``matmul_attention`` its textbook form (scores, softmax, P·V as
        batched matmuls, differentiated op by op into matmuls)."""
        cfg, s = self.config, self.seq
        h, kvh, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        if not self.matmul_attention:
            return g.attention(
                q, k, v, heads=h, kv_heads=kvh, head_dim=d, mask="causal",
                score_scale=cfg.score_scale,
            )  # fmt: skip
        rep = h // kvh

        def heads(x: Node, n: int) -> Node:  # [1, s, n·d] → [n, s, d]
            return g.transpose(g.reshape(x, [s, n, d]), [1, 0, 2])

        def repeat(x: Node) -> Node:  # [kvh, s, d] → [heads, s, d], head j reads j // rep
            if rep == 1:
                return x
            full = g.expand(g.reshape(x, [kvh, 1, s, d]), [kvh, rep, s, d])
            return g.reshape(full, [h, s, d])

        scale = cfg.score_scale if cfg.score_scale is not None else d**-0.5
        kh, vh = repeat(heads(k, kvh)), repeat(heads(v, kvh))
        scores = g.matmul(heads(q, h), g.transpose(kh, [0, 2, 1])) * scale
        if self._causal is None:
            self._causal = g.constant(np.triu(np.full((s, s), -1e30, np.float32), 1))
        p = g.softmax(scores + self._causal, -1)
        a = g.matmul(p, vh)  # [h, s, d]
        return g.reshape(g.transpose(a, [1, 0, 2]), [1, s, h * d])

    # ------------------------------------------------------------ state
    def init_adapters(self) -> None:
        """peft's init: ``A`` uniform in ``±1/√k`` (kaiming-uniform with
        ``a = √5``), ``B`` zero; optimizer moments and step zeroed."""
        self.exe.reset_state()
        rng = np.random.default_rng(self.lora.seed)
        for name in self.adapters:
            if name.endswith(".lora_a"):
                r, k = self.exe.states[name].shape
                bound = 1.0 / np.sqrt(k)
                self.exe.set_state(name, rng.uniform(-bound, bound, (r, k)).astype(np.float32))
        self.step_count = 0

    def lr(self, step: Optional[int] = None) -> float:
        """The learning rate update ``step`` (default: the next one) runs
        with: the optimizer's ``lr`` times the schedule's multiplier."""
        t = self.step_count if step is None else step
        f = 1.0 if self.schedule is None else float(self.schedule.factor(t))
        return self.optimizer.lr * f

    def step(self, ids: np.ndarray) -> dict[str, float]:
        """One update on ``seq + 1`` token ids (inputs ``ids[:-1]``, targets
        ``ids[1:]``), or on ``[accumulate, seq + 1]`` of them when
        accumulating: the (mean) loss before the update and the global norm
        of the gradient (of the accumulated one; before clipping; NaN when
        not clipping)."""
        k, n = self.accumulate, self.seq + 1
        ids = np.asarray(ids, np.int64)
        if ids.size != k * n or (k > 1 and ids.ndim != 2):
            want = f"{n}" if k == 1 else f"[{k}, {n}]"
            raise RlxError(f"[lora] step needs {want} ids, got shape {list(ids.shape)}")
        losses, norm = [], np.nan
        for row in ids.reshape(k, n):
            emb = self.weights.embedding_rows("token_embd.weight", row[:-1])
            emb = emb.reshape(1, self.seq, self.config.hidden)
            out = self.exe.run(embeds=emb, targets=row[1:].astype(np.int32))
            vals = list(out.values())
            losses.append(float(np.asarray(vals[0]).reshape(-1)[0]))
            if len(vals) > 1:
                norm = float(np.asarray(vals[1]).reshape(-1)[0])
        self.step_count += 1
        return {"loss": float(np.mean(losses)), "grad_norm": norm}

    def batch(self, tokens: np.ndarray, step: int, seed: int = 0) -> np.ndarray:
        """The ids step ``step`` trains on: one window of ``seq + 1`` ids
        (``[accumulate, seq + 1]`` when accumulating), starts drawn from
        ``(seed, step)`` alone, so a resumed run sees the same data."""
        n = len(tokens) - (self.seq + 1)
        if n < 0:
            raise RlxError(f"[lora] corpus has {len(tokens)} tokens; a step needs {self.seq + 1}")
        rng = np.random.default_rng((seed, step))
        if self.accumulate == 1:
            start = int(rng.integers(0, n + 1))
            return np.asarray(tokens[start : start + self.seq + 1])
        starts = rng.integers(0, n + 1, self.accumulate)
        return np.stack([np.asarray(tokens[s : s + self.seq + 1]) for s in starts])

    def save(self, path: Union[str, Path], adapters_only: bool = False) -> None:
        """Adapters (and unless ``adapters_only`` the optimizer's moments and
        step) to a safetensors file; the trainer's step count and LoRA
        config in its metadata."""
        names = self.adapters if adapters_only else sorted(self.exe.states)
        meta = {"step": str(self.step_count), "lora": repr(asdict(self.lora))}
        save_checkpoint(self.exe, path, names, meta)

    def load(self, path: Union[str, Path]) -> None:
        """Resume from :meth:`save` (full checkpoint)."""
        meta = load_checkpoint(self.exe, path)
        self.step_count = int(meta.get("step", int(self.exe.state(STEP_STATE)[0])))
