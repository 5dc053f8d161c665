"""Randomized differential test for the pattern passes the generic random
DAGs of ``test_fusion_property.py`` never reach: fuse_decode_mlp,
fuse_decode_mlp_combined_gate_up (SwiGLU / GELU, with and without the
down + residual tail, every GGUF type the decode MLP uses), fuse_residual_rms_norm,
fuse_gdn_gated_norm, fuse_depthwise_conv1d_bsc, fuse_narrow_rope and
fuse_narrow_clusters.

Each seeded case is one graph holding 1–3 pattern instances drawn from
templates with random shapes, quant types, dtypes and a random *variant*:
the plain pattern (must fire), a blocking variant (an intermediate is also
an output, is read again, the pattern is prefill / f16 / has a gap or an
overlap: must not fire) or a variant where firing depends on the planner's
slot reuse (no assertion on firing). Every instance reads its own inputs;
the planner may still reuse one instance's dead slots for another's
values, which varies the aliasing the passes see.

Per case the graph is compiled three times on the host executor:

* all passes on,
* every pass under test off (``RLX_DISABLE_PASS``),
* one random pass under test off (the others on);

and all outputs must agree: ``max|a − b| ≤ 1e-5 · (1 + max|b|)`` per f32
output (the fused kernels compute the same per-element arithmetic, so the
difference is in fact 0 or a few ulps), ``2e-3 · (1 + max|b|)`` per f16
output (the fused residual norm does not round the sum to f16: one f16
ulp). ``ir_fuse_residual_rms_norm`` is off in all three runs: that
graph-level twin would take the residual-norm pattern before lowering.

Firing: per case and pass, the match count must lie in ``[sure, sure +
maybe]`` — sure = instances that must fire, maybe = planner-dependent ones —
so a plain pattern that does not fire fails, and so does a blocking variant
that fires (unless a plain one in the same case fails to fire at the same
time; the cases where a pass has only blocking instances pin it to 0).
Over the run each pass must fire in a good share of the cases and its
blocking variants must be the only instances of the pass in many cases;
the decode-MLP fusions must have fired for every quant type, SwiGLU and
GELU, with and without the tail.

Limits. The host executor stages an operand that overlaps the output, so
the "output must not overlap an operand with a shift" preconditions (kept
for the Metal kernels) are not visible here: dropping one does not change
host outputs. Dropping a liveness precondition is (checked by hand:
without the gated norm's "norm is dead" check 20 of the 500 cases fail).

The MLP activations are f32 (``dequant_matmul`` returns f32); the f16
decode-MLP forms are covered by the hand-built schedules in
``crates/rlx-metal/src/passes/decode_mlp_tests.rs``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Callable

import numpy as np
import pytest
import rlx
from rlx.reference.gguf_blocks import GEOMETRY
from test_decode_mlp import packed

CASES = 500
SEP, COMB = "fuse_decode_mlp", "fuse_decode_mlp_combined_gate_up"
RRMS, GDN = "fuse_residual_rms_norm", "fuse_gdn_gated_norm"
CONV, ROPE, SPLIT = "fuse_depthwise_conv1d_bsc", "fuse_narrow_rope", "fuse_narrow_clusters"
UNDER_TEST = [SEP, COMB, RRMS, GDN, CONV, ROPE, SPLIT]
TAIL = "tail"  # fused_mlp_down_residual thunks in the schedule (part of SEP / COMB)
IR_TWIN = "ir_fuse_residual_rms_norm"
MLP_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
MLP_TYPES += ["f16", "f32"]
REL = 1e-5
#: f16 outputs: the fused residual norm keeps the sum in f32 where the
#: unfused add rounds it to f16 first, which moves the result by an f16 ulp
REL_F16 = 2e-3
#: each pass must fire in at least this share of the cases
MIN_FIRE_SHARE = 0.08
#: and be blocked (its only instances in the case are blocking) in this many cases
MIN_BLOCKED_CASES = 10

Expect = dict[str, tuple[int, int]]


class Case:
    """One random graph: feeds, params, and the expected match range per pass."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.g = rlx.Graph(f"pattern{seed}")
        self.feed: dict[str, np.ndarray] = {}
        self.params: dict[str, np.ndarray] = {}
        self.outs: list[rlx.Node] = []
        self.sure: Counter[str] = Counter()
        self.maybe: Counter[str] = Counter()
        self.blocked: Counter[str] = Counter()
        self.variants: list[str] = []
        #: forms of the instances that must fire (quant type, gating, tail)
        self.forms: set[str] = set()
        self.n = 0

    # -- helpers ---------------------------------------------------------
    def _name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def inp(self, shape: list[int], dtype: str = "f32", scale: float = 1.0) -> rlx.Node:
        name = self._name("x")
        v = scale * self.rng.standard_normal(shape)
        self.feed[name] = v.astype(np.float16 if dtype == "f16" else np.float32)
        return self.g.input(name, shape, dtype)

    def par(self, value: np.ndarray) -> rlx.Node:
        name = self._name("p")
        self.params[name] = value
        dt = {np.dtype(np.uint8): "u8", np.dtype(np.float16): "f16"}.get(value.dtype, "f32")
        return self.g.param(name, list(value.shape), dt)

    def fpar(self, shape: list[int], dtype: str = "f32") -> rlx.Node:
        v = self.rng.standard_normal(shape)
        return self.par(v.astype(np.float16 if dtype == "f16" else np.float32))

    def expect(self, name: str, kind: str, count: int = 1) -> None:
        """Record ``count`` instances of pass ``name``: sure / maybe / blocked."""
        if kind == "sure":
            self.sure[name] += count
        elif kind == "maybe":
            self.maybe[name] += count
        else:
            self.blocked[name] += count

    def pick(self, weighted: dict[str, int]) -> str:
        keys = list(weighted)
        w = np.array([weighted[k] for k in keys], np.float64)
        v = str(keys[int(self.rng.choice(len(keys), p=w / w.sum()))])
        return v

    # -- templates -------------------------------------------------------
    def mlp(self) -> None:
        """Decode MLP: gate/up (separate or packed), SwiGLU / GELU, optional tail."""
        r, g = self.rng, self.g
        typ = str(r.choice(MLP_TYPES))
        bs = GEOMETRY[typ][0]
        k = 256 if bs == 256 else int(r.choice([32, 64, 96]))
        n = 256 if bs == 256 else int(r.choice([32, 64, 128]))
        gelu, comb, tail = bool(r.integers(2)), bool(r.integers(2)), bool(r.integers(2))
        v = self.pick({"fire": 4, "gate_out": 1, "act_out": 1, "up_read": 1, "prefill": 1})
        if tail and v == "fire" and r.integers(3) == 0:
            v = "down_out"
        name = COMB if comb else SEP
        self.variants.append(f"mlp:{typ}:{'gelu' if gelu else 'silu'}:{name}:{tail}:{v}")
        rows = 2 if v == "prefill" else 1
        x = self.inp([1, rows, k])
        if comb:
            wq = np.concatenate([packed(typ, n, k, r), packed(typ, n, k, r)])
            c = g.dequant_matmul(x, self.par(wq), scheme=typ, n=2 * n, k=k)
            gate, up = g.narrow(c, -1, 0, n), g.narrow(c, -1, n, n)
        else:
            wg, wu = packed(typ, n, k, r), packed(typ, n, k, r)
            gate = g.dequant_matmul(x, self.par(wg), scheme=typ, n=n, k=k)
            up = g.dequant_matmul(x, self.par(wu), scheme=typ, n=n, k=k)
        a = g.gelu_approx(gate) if gelu else g.silu(gate)
        p = g.mul(a, up) if r.integers(2) else g.mul(up, a)
        if v == "gate_out":
            self.outs.append(gate)
        elif v == "act_out":
            self.outs.append(a)
        elif v == "up_read":
            self.outs.append(g.mul(up, 2.0))
        if tail:
            h = self.inp([1, rows, k])
            d = g.dequant_matmul(p, self.par(packed(typ, k, n, r)), scheme=typ, n=k, k=n)
            self.outs.append(g.add(h, d) if r.integers(2) else g.add(d, h))
            if v == "down_out":
                self.outs.append(d)
            if r.integers(2):
                self.outs.append(p)
        else:
            self.outs.append(p)
        fires = v in ("fire", "down_out")
        self.expect(name, "sure" if fires else "blocked")
        if fires:
            act = "gelu" if gelu else "silu"
            self.forms |= {f"{typ}", f"{name}:{act}:tail={v == 'fire' and tail}"}
        if comb and v == "prefill":
            self.expect(SPLIT, "maybe")  # two rows: the halves are real narrows
        if tail:
            self.expect(TAIL, "sure" if v == "fire" else "blocked")

    def residual_norm(self) -> None:
        """``rms_norm(x + r)``; blocked when the sum stays live."""
        r, g = self.rng, self.g
        rows, h = int(r.integers(1, 5)), int(r.integers(1, 41))
        v = self.pick({"fire": 4, "post_attn": 1, "sum_out": 1, "sum_read": 1, "no_keep": 1})
        dt = "f16" if r.integers(3) == 0 else "f32"
        self.variants.append(f"rrms:{rows}x{h}:{dt}:{v}")
        x, res = self.inp([rows, h], dt), self.inp([rows, h], dt)
        s = g.add(x, res) if r.integers(2) else g.add(res, x)
        n = g.rms_norm(s, self.fpar([h], dt), eps=float(r.choice([1e-6, 1e-5])))
        if v == "post_attn":
            self.outs.append(g.add(s, n))
        else:
            self.outs.append(n)
            if v == "sum_out":
                self.outs.append(s)
            elif v == "sum_read":
                self.outs.append(g.mul(s, 3.0))
        if v != "no_keep":
            # x and r read again: the norm cannot be placed over their slots
            # (a shifted overlap, which the pass must refuse)
            self.outs.append(g.sub(x, res))
        self.expect(RRMS, {"fire": "sure", "no_keep": "maybe"}.get(v, "blocked"))

    def gated_norm(self) -> None:
        """``rms_norm(x) · silu(z)`` (GDN); blocked when the norm is live or f16."""
        r, g = self.rng, self.g
        rows, h = int(r.integers(1, 6)), int(r.integers(1, 49))
        v = self.pick({"fire": 4, "norm_out": 1, "f16": 1, "no_keep": 1})
        self.variants.append(f"gdn:{rows}x{h}:{v}")
        dt = "f16" if v == "f16" else "f32"
        x, z = self.inp([rows, h], dt), self.inp([rows, h], dt, scale=3.0)
        beta = self.fpar([h], dt) if r.integers(2) else None
        n = g.rms_norm(x, self.fpar([h], dt), beta, eps=1e-6)
        gate = g.silu(z)
        self.outs.append(g.mul(n, gate) if r.integers(2) else g.mul(gate, n))
        if v == "norm_out":
            self.outs.append(n)
        if v != "no_keep":
            # x and z read again: the product cannot be placed on their slots
            self.outs.append(g.add(x, z))
        kind = {"fire": "sure", "no_keep": "maybe"}.get(v, "blocked")
        self.expect(GDN, kind)

    def conv(self) -> None:
        """GDN ``ssm_conv1d``: transpose → depthwise conv2d → transpose (→ SiLU)."""
        r, g = self.rng, self.g
        kt = int(r.integers(2, 5))
        w, c = kt + int(r.integers(0, 6)), int(r.integers(1, 17))
        s = w - kt + 1
        silu = bool(r.integers(4))
        v = self.pick({"fire": 4, "conv_out": 1, "no_keep": 1})
        self.variants.append(f"conv:w{w}c{c}k{kt}:{silu}:{v}")
        x = self.inp([1, w, c])
        bcw = g.reshape(g.transpose(x, [0, 2, 1]), [1, c, 1, w])
        y = g.conv2d(bcw, self.fpar([c, 1, 1, kt]), groups=c)
        bsc = g.transpose(g.reshape(y, [1, c, s]), [0, 2, 1])
        self.outs.append(g.silu(bsc) if silu else g.mul(bsc, 1.0))
        if v == "conv_out":
            self.outs.append(y)
        if v != "no_keep":
            self.outs.append(g.mul(x, 2.0))
        self.expect(CONV, {"fire": "sure", "no_keep": "maybe"}.get(v, "blocked"))

    def qkv_rope(self) -> None:
        """A fused QKV narrowed three ways, Q and K rotated (NeoX)."""
        r, g = self.rng, self.g
        hd = int(r.choice([4, 8]))
        heads, kvh = int(r.integers(1, 4)), int(r.integers(1, 3))
        v = self.pick({"fire": 4, "q_out": 1, "decode": 1, "no_keep": 1})
        s = 1 if v == "decode" else int(r.integers(2, 7))
        dt = "f16" if r.integers(3) == 0 else "f32"
        self.variants.append(f"rope:s{s}h{heads}kv{kvh}d{hd}:{dt}:{v}")
        qd, kd = heads * hd, kvh * hd
        x = self.inp([1, s, qd + 2 * kd], dt)
        ang = r.uniform(-3, 3, (s, hd // 2))
        cos, sin = self.inp([s, hd // 2], dt), self.inp([s, hd // 2], dt)
        self.feed[cos.name] = np.cos(ang).astype(self.feed[cos.name].dtype)
        self.feed[sin.name] = np.sin(ang).astype(self.feed[sin.name].dtype)
        q = g.narrow(x, -1, 0, qd)
        k = g.narrow(x, -1, qd, kd)
        vv = g.narrow(x, -1, qd + kd, kd)
        self.outs += [g.rope(q, cos, sin, head_dim=hd), g.rope(k, cos, sin, head_dim=hd)]
        self.outs.append(g.mul(vv, 2.0))
        if v == "q_out":
            self.outs.append(q)
        if v != "no_keep":
            self.outs.append(g.mul(x, 1.0))
        if v == "fire":
            self.expect(ROPE, "sure", 2)
        elif v == "q_out":
            self.expect(ROPE, "sure")
            self.expect(ROPE, "blocked")
        elif v == "decode":
            self.expect(ROPE, "blocked", 2)
        else:
            self.expect(ROPE, "maybe", 2)
            self.expect(SPLIT, "maybe")

    def split(self) -> None:
        """Last-axis narrows of one parent: contiguous, gapped or overlapping."""
        r, g = self.rng, self.g
        parts = [int(w) for w in r.integers(1, 10, size=int(r.integers(2, 5)))]
        v = self.pick({"fire": 4, "gap": 1, "overlap": 1, "one_row": 1})
        rows = 1 if v == "one_row" else int(r.integers(2, 6))
        starts = list(np.cumsum([0, *parts[:-1]]))
        if v == "gap":
            starts = [s + i for i, s in enumerate(starts)]
        elif v == "overlap":
            starts = [max(0, s - i) for i, s in enumerate(starts)]
            if all(a == b for a, b in zip(starts, np.cumsum([0, *parts[:-1]]))):
                starts[-1] -= 1
        total = max(int(s) + w for s, w in zip(starts, parts))
        dt = "f16" if r.integers(3) == 0 else "f32"
        self.variants.append(f"split:{rows}:{parts}:{[int(s) for s in starts]}:{dt}:{v}")
        x = self.inp([rows, total], dt)
        narrows = [g.narrow(x, -1, int(s), w) for s, w in zip(starts, parts)]
        # some pieces feed a consumer instead of being outputs themselves
        for nw in narrows:
            self.outs.append(g.mul(nw, 0.5) if r.integers(3) == 0 else nw)
        # SplitLastAxis is f32-only: f16 narrows must stay
        self.expect(SPLIT, "sure" if v == "fire" and dt == "f32" else "blocked")

    def build(self) -> None:
        templates: list[Callable[[], None]] = [
            self.mlp,
            self.mlp,
            self.residual_norm,
            self.gated_norm,
            self.conv,
            self.qkv_rope,
            self.split,
        ]
        for _ in range(int(self.rng.integers(1, 4))):
            templates[int(self.rng.integers(len(templates)))]()
        self.g.outputs(*self.outs)

    def expected(self) -> Expect:
        names = set(self.sure) | set(self.maybe) | set(self.blocked)
        return {p: (self.sure[p], self.sure[p] + self.maybe[p]) for p in names}


def _run(case: Case, disable: list[str]) -> tuple[dict[str, np.ndarray], rlx.Executable]:
    os.environ["RLX_DISABLE_PASS"] = ",".join([IR_TWIN, *disable])
    try:
        exe = rlx.compile(case.g, device="host")
    finally:
        del os.environ["RLX_DISABLE_PASS"]
    for name, val in case.params.items():
        exe.set_param(name, val)
    return exe.run(**case.feed), exe


def _agree(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str, worst: Counter[str]
) -> None:
    """Asserts the tolerance; keeps the largest ``|a − b| / (1 + max|b|)`` per dtype."""
    assert a.keys() == b.keys(), what
    for k in a:
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        assert x.shape == y.shape, (what, k)
        rel = REL_F16 if a[k].dtype == np.float16 else REL
        bound = rel * (1.0 + float(np.max(np.abs(y), initial=0.0)))
        diff = float(np.max(np.abs(x - y), initial=0.0))
        assert diff <= bound, f"{what}: output {k} differs by {diff} > {bound}"
        dt = str(a[k].dtype)
        worst[dt] = max(worst[dt], diff / bound * rel)


def test_pattern_passes_on_vs_off() -> None:
    t0 = time.perf_counter()
    fired_cases: Counter[str] = Counter()
    blocked_cases: Counter[str] = Counter()
    instances: Counter[str] = Counter()
    forms: set[str] = set()
    worst: Counter[str] = Counter()
    for seed in range(CASES):
        case = Case(seed)
        case.build()
        what = f"case {seed} {case.variants}"
        on, exe_on = _run(case, [])
        off, _ = _run(case, UNDER_TEST)
        present = sorted(p for p in case.expected() if p != TAIL)
        one = present[int(case.rng.integers(len(present)))]
        off_one, exe_one = _run(case, [one])
        _agree(on, off, f"{what} (all on vs all off)", worst)
        _agree(off_one, off, f"{what} ({one} off vs all off)", worst)
        assert exe_one.stats["pass_matches"][one] == -1
        matches = dict(exe_on.stats["pass_matches"])
        matches[TAIL] = exe_on.schedule.count("fused_mlp_down_residual")
        for p, (lo, hi) in case.expected().items():
            assert lo <= matches[p] <= hi, f"{what}: {p} matched {matches[p]}, want [{lo}, {hi}]"
            instances[p] += case.sure[p] + case.maybe[p] + case.blocked[p]
            if matches[p] > 0:
                fired_cases[p] += 1
            if case.sure[p] + case.maybe[p] == 0:
                blocked_cases[p] += 1
        forms |= case.forms
        # passes without an instance in the case do not fire either
        for p in UNDER_TEST:
            if p not in case.expected():
                assert matches[p] == 0, f"{what}: {p} fired without an instance"
    elapsed = time.perf_counter() - t0
    print(f"\n{CASES} cases in {elapsed:.1f} s; largest |on - off| / (1 + max|off|): {worst}")
    for p in [*UNDER_TEST, TAIL]:
        print(
            f"{p:<34} fired in {fired_cases[p]:>3} cases, blocked-only in"
            f" {blocked_cases[p]:>3}, instances {instances[p]:>3}"
        )
    for p in [*UNDER_TEST, TAIL]:
        assert fired_cases[p] >= MIN_FIRE_SHARE * CASES, (p, fired_cases)
        assert blocked_cases[p] >= MIN_BLOCKED_CASES, (p, blocked_cases)
    # the decode-MLP fusions fired for every quant type, gating and tail form
    want = set(MLP_TYPES) | {
        f"{p}:{a}:tail={t}" for p in (SEP, COMB) for a in ("silu", "gelu") for t in (False, True)
    }
    assert want <= forms, sorted(want - forms)


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLX_DISABLE_PASS", raising=False)
