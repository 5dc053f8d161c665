"""Issue 19 point 1: every thunk variant is reached from the public graph API.

For each variant of the Rust enum (``rlx._rlx.thunk_variants``), its probe
graph (``rlx.thunk_coverage.PROBES``) must compile to a schedule holding
that thunk, run on the host without the numpy fallback, and compile for
metal-sim with no host command for it — except the seed's host variants
(``*Host``, ``HostOp``, ``CustomOp``), which may do both by design.

Variants not reachable yet are listed in ``KNOWN_GAPS`` with the reason;
their test is expected to fail (the probe does not lower to the variant,
or runs it through the fallback / as a Metal host command), and it fails
as soon as the gap closes, so the list has to be updated with the fix.
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from rlx import _rlx
from rlx.thunk_coverage import (
    PROBES,
    compile_probe,
    complete,
    host_by_design,
    probe_env,
    seed_metal_host,
    thunk_table,
)

KNOWN_GAPS: dict[str, str] = {}

VARIANTS = [(v, n) for v, n in _rlx.thunk_variants() if v != "Nop"]


def test_variant_list_is_the_seed_set() -> None:
    # 107 seed thunks plus Nop, plus rlx's DequantMatMulGgufT (training);
    # every one has a probe and a distinct name
    assert len(VARIANTS) == 108
    assert len({n for _, n in VARIANTS}) == 108
    names = {v for v, _ in VARIANTS}
    assert set(PROBES) <= names and set(KNOWN_GAPS) <= names
    # a variant without a probe graph is a listed gap
    assert names - set(PROBES) <= set(KNOWN_GAPS)


def _check(variant: str, name: str) -> None:
    p, exe = compile_probe(variant)
    st = exe.stats
    assert name in st["by_thunk"], f"{variant} probe lowers to {sorted(st['by_thunk'])}"
    out = exe.run(**p.feeds)
    assert out, "probe has outputs"
    for v in out.values():
        arr = np.asarray(v)
        if arr.dtype.kind == "f":
            assert np.all(np.isfinite(arr)), f"{variant}: non-finite output"
    if not host_by_design(variant):
        assert name not in exe.stats["fallback_by_thunk"], f"{variant} runs on the fallback"
    with probe_env(variant):
        sim = rlx.compile(p.g, device="metal-sim")
    assert name in sim.stats["by_thunk"]
    if not seed_metal_host(variant):
        assert name not in sim.stats["metal_host_by_thunk"], f"{variant} is a Metal host command"


@pytest.mark.parametrize(
    "variant,name",
    [
        pytest.param(v, n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[v]))
        if v in KNOWN_GAPS
        else (v, n)
        for v, n in VARIANTS
    ],
)
def test_variant_is_reached_native_and_on_metal(variant: str, name: str) -> None:
    _check(variant, name)


def test_table_matches_the_gaps() -> None:
    rows = thunk_table()
    assert [r.variant for r in rows] == [v for v, _ in VARIANTS]
    for r in rows:
        assert complete(r) != (r.variant in KNOWN_GAPS), r


def test_cli_inspect_thunks_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from rlx import cli

    assert cli.main(["inspect", "--thunks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["variant", "reached", "native", "metal", "seed-host"]
    assert [ln.split()[0] for ln in lines[1:-1]] == [v for v, _ in VARIANTS]
    gaps = len(KNOWN_GAPS)
    assert lines[-1].startswith("108 thunk variants: ")
    assert lines[-1].endswith(f"{108 - gaps} complete, {gaps} gaps")
