"""A seeded, dependency-free mutation fuzzer for the targets of
:mod:`targets` (the bounded CI run and the recorded campaign; the atheris
harnesses ``fuzz_*.py`` are the coverage-guided alternative).

Each execution takes an input from the corpus (the committed seeds under
``fuzz/corpus/<target>/`` plus inputs found along the way), applies one to
four random mutations (bit flips, interesting bytes and integers written
over header fields — 0, -1, 2^31, 2^32, 2^62, 2^63, 2^64-1 —, chunk
insert / delete / duplicate, truncation, splicing with another input, and
for JSON text number / nesting / duplicate-key edits) and runs the target.
An input whose outcome is new (accepted, or an error message not seen yet,
digits masked) joins the corpus: a cheap stand-in for coverage feedback; a
third of the parents are the committed seeds themselves.

Outcomes are counted as *ok* (accepted), *rlx_error* (an ``RlxError``:
the expected rejection) or a *finding*: any other exception, or a *hang*
(one execution over ``--timeout`` seconds, interrupted by SIGALRM). Each
finding's input is written to ``--out`` and the run exits 1.

    python fuzz/mutate.py gguf --runs 100000 --seed 1
    python fuzz/mutate.py safetensors --seconds 30
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import struct
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import ALLOWED, TARGETS  # noqa: E402

ROOT = Path(__file__).resolve().parent
INTS = [0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 255, 256, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000,
        0xFFFFFFFF, 1 << 32, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]  # fmt: skip
JSON_TOKENS = [b"1e400", b"-1", b"2.5", b"0", b"18446744073709551616", b"true", b"null",
               b"[]", b"{}", b'"x"', b"NaN", b"-0", b"9" * 5000, b"[[[[[[[[", b'"F32"',
               b'"BF16"', b'"I8"', b'"shape"', b'"dtype"', b'"data_offsets"', b'"__metadata__"',
               b"[1, 2]", b"[0, 0]", b"4294967296", b"[4611686018427387904, 4]"]  # fmt: skip
NUM = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class Hang(Exception):
    """Raised by SIGALRM when one execution runs too long."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def mutate_safetensors(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    """Mostly structure-aware: mutate the JSON header as text and the data
    area as bytes, then write the header length back (so the header still
    frames); sometimes a raw mutation of the whole file."""
    n = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else -1
    if n < 0 or 8 + n > len(data) or rng.random() < 0.15:
        return mutate(rng, data, corpus, True)
    head, body = data[8 : 8 + n], data[8 + n :]
    if rng.random() < 0.85:
        head = mutate(rng, head, [c[8:] for c in corpus[:8]], True)
    else:
        body = mutate(rng, body, corpus, False)
    return struct.pack("<Q", len(head)) + head + body


def mutate(rng: random.Random, data: bytes, corpus: list[bytes], text: bool) -> bytes:
    """One to four stacked random mutations of ``data`` (one half the time)."""
    b = bytearray(data)
    for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 4)):
        op = rng.randrange(11 if text else 9)
        n = len(b)
        if n == 0:
            b += rng.randbytes(rng.randint(1, 16))
            continue
        i = rng.randrange(n)
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, 1, rng.randrange(256)))
        elif op in (2, 3):  # an interesting integer over a (header) field
            i = rng.randrange(min(n, 512)) if rng.random() < 0.7 else i
            if rng.random() < 0.5:
                i -= i % 4
            size = rng.choice((4, 8))
            v = rng.choice(INTS) if rng.random() < 0.8 else rng.getrandbits(size * 8)
            v = (v + rng.choice((0, 0, 1, -1))) % (1 << (8 * size))
            b[i : i + size] = struct.pack("<Q" if size == 8 else "<I", v)[: max(0, n - i)]
        elif op == 4:
            del b[i : i + rng.randint(1, 64)]
        elif op == 5:
            j = rng.randrange(n)
            b[i:i] = b[j : j + rng.randint(1, 64)]
        elif op == 6:
            del b[rng.randrange(n) :]
        elif op == 7:
            b[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 8:  # splice with another input
            other = rng.choice(corpus)
            j = rng.randrange(len(other) + 1)
            b = b[:i] + bytearray(other[j:])
        elif op == 9:  # JSON: replace a number token
            nums = list(NUM.finditer(bytes(b[: 1 << 16])))
            if nums:
                m = rng.choice(nums)
                b[m.start() : m.end()] = rng.choice(JSON_TOKENS)
        else:  # JSON: insert a token or duplicate a key
            if rng.random() < 0.5:
                b[i:i] = rng.choice(JSON_TOKENS)
            else:
                keys = list(re.finditer(rb'"[^"]{1,40}":', bytes(b[: 1 << 16])))
                if keys:
                    k = rng.choice(keys)
                    b[k.start() : k.start()] = k.group() + b"0,"
    return bytes(b)


def _signature(e: BaseException) -> str:
    return type(e).__name__ + ":" + re.sub(r"\d+", "#", str(e).split(":")[-1])[:60]


def run(target: str, runs: int, seconds: float, seed: int, corpus_dir: Path, out: Path,
        timeout: float, quiet: bool = False) -> dict[str, Any]:  # fmt: skip
    """Fuzz ``target``; returns the counts (``findings`` > 0 is a failure)."""
    fn = TARGETS[target]
    seeds = [p.read_bytes() for p in sorted(corpus_dir.glob("*")) if p.is_file()]
    if not seeds:
        raise SystemExit(f"no seeds in {corpus_dir}")
    text = target in ("safetensors", "graph_json", "hf_config")
    rng = random.Random(seed)
    corpus = list(seeds)
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    findings: list[dict[str, str]] = []
    old = signal.signal(signal.SIGALRM, _alarm)
    t0 = time.monotonic()
    last = t0
    try:
        for it in range(runs):
            if time.monotonic() - t0 > seconds:
                break
            if it < len(seeds):
                data = seeds[it]
            else:
                # a third of the time a committed seed is the parent: the
                # corpus fills with rejected inputs, and the valid seeds keep
                # mutants reaching past the header checks
                parent = rng.choice(seeds if rng.random() < 0.33 else corpus)
                if target == "safetensors":
                    data = mutate_safetensors(rng, parent, corpus)
                else:
                    data = mutate(rng, parent, corpus, text)
            kind: Optional[str] = None
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                fn(data)
                sig = "ok"
                counts["ok"] += 1
            except Hang:
                kind, sig = "hang", "hang"
            except ALLOWED as e:
                counts["rlx_error"] += 1
                sig = _signature(e)
            except BaseException as e:  # noqa: BLE001 — every other exception is a finding
                if isinstance(e, KeyboardInterrupt):
                    raise
                kind, sig = type(e).__name__, _signature(e)
                detail = traceback.format_exc(limit=6)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            counts["executions"] += 1
            if kind is not None:
                counts["findings"] += 1
                out.mkdir(parents=True, exist_ok=True)
                h = hashlib.sha1(data).hexdigest()[:16]
                (out / f"{target}-{kind}-{h}").write_bytes(data)
                findings.append({"kind": kind, "input": f"{target}-{kind}-{h}",
                                 "detail": detail if kind != "hang" else "hang"})  # fmt: skip
                if not quiet:
                    print(
                        f"FINDING {kind} -> {out / findings[-1]['input']}\n"
                        + findings[-1]["detail"]
                    )
            elif (
                (sig not in seen or (sig == "ok" and rng.random() < 0.05))
                and len(corpus) < 4096
                and len(data) < 1 << 20
            ):
                seen.add(sig)
                corpus.append(data)
            now = time.monotonic()
            if not quiet and now - last > 60:
                last = now
                print(f"[{target}] {dict(counts)} corpus={len(corpus)} {now - t0:.0f}s", flush=True)
    finally:
        signal.signal(signal.SIGALRM, old)
    res = {"target": target, "seed": seed, "seconds": round(time.monotonic() - t0, 1),
           "corpus": len(corpus), **dict(counts), "findings_list": findings}  # fmt: skip
    res.setdefault("findings", 0)
    res.setdefault("ok", 0)
    res.setdefault("rlx_error", 0)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", choices=sorted(TARGETS))
    ap.add_argument("--runs", type=int, default=10**9)
    ap.add_argument("--seconds", type=float, default=float("inf"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "findings")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds before an input is a hang")
    ap.add_argument("--json", type=Path, default=None, help="write the counts here")
    a = ap.parse_args()
    res = run(a.target, a.runs, a.seconds, a.seed, a.corpus or ROOT / "corpus" / a.target,
              a.out, a.timeout)  # fmt: skip
    print(json.dumps({k: v for k, v in res.items() if k != "findings_list"}))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    sys.exit(1 if res["findings"] else 0)


if __name__ == "__main__":
    main()
