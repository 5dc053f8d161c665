"""``rlx inspect MODEL --html report.html``: one self-contained page (inline
CSS, SVG and a few lines of JS; nothing is fetched) per compiled model.

Per graph (decode, and prefill with ``--seq``) it shows:

* figures: thunks, dispatches before / after the passes, arena vs naive
  bytes, the Metal plan's dispatches, barriers and host commands;
* the schedule per layer: one chip per thunk, coloured by kind, fused
  thunks (made by a thunk pass) outlined in their pass's colour; runs of
  layers with the same schedule are folded into one row;
* the arena as a lifetime chart: x is the thunk index, y the arena offset,
  one rectangle per buffer from the thunk that writes it to the last one
  that reads it (:mod:`rlx.report.data`), layers as bands;
* the Metal plan: every command in order (dispatch coloured by kernel
  family, barrier as a red bar, host command in black), with the kernels
  and the concurrent runs between barriers counted;
* the pass report: per graph fusion and thunk pass its matches, counts
  before / after and the thunk kinds it removed and made.

Hovering a chip marks the buffers its thunk writes and its column in the
arena chart; hovering a buffer marks the thunk that wrote it.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from typing import Any, Optional

from rlx.report.data import Command, GraphData, ThunkRow

__all__ = ["category", "render"]

# kind category -> (colour, words in a thunk / kernel name that select it)
_CATEGORIES: list[tuple[str, str, tuple[str, ...]]] = [
    ("matmul", "#4e79a7", ("matmul", "gemm", "gemv", "mm_", "mlp", "sgemm", "quant")),
    ("rope", "#ff9da7", ("rope",)),
    ("attention", "#b07aa1", ("attn", "attention", "sdpa")),
    ("norm", "#59a14f", ("norm",)),
    (
        "elementwise",
        "#f28e2b",
        (
            "binary",
            "region",
            "activation",
            "swiglu",
            "gelu",
            "cast",
            "fma",
            "where",
            "compare",
            "bias",
            "elementwise",
            "residual",
        ),
    ),
    ("softmax / reduce", "#76b7b2", ("softmax", "reduce", "arg", "topk", "sample", "cumsum")),
    ("indexing", "#9c755f", ("gather", "scatter", "index", "embed")),
    ("layout", "#a0a0a0", ("copy", "narrow", "concat", "transpose", "split", "reverse", "shape")),
    ("recurrent / conv", "#edc948", ("scan", "conv", "delta", "mamba", "lstm", "gru", "rnn")),
]
_OTHER = ("other", "#bab0ac")
# pass outlines: saturated / dark, apart from the kind colours above
_PASS_COLOURS = [
    "#800000",
    "#f032e6",
    "#000075",
    "#e6194b",
    "#000000",
    "#911eb4",
    "#808000",
    "#00a3c4",
    "#ff4500",
]

_CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 background:#f6f7f9;color:#1d232b}
header{background:#1d232b;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#c9d1db}
nav{padding:8px 24px;background:#e9ecf1;position:sticky;top:0;z-index:2}
nav a{margin-right:14px;color:#1d4e89;text-decoration:none}
main{padding:0 24px 40px}
section.graph{margin-top:20px}
h2{font-size:18px;border-bottom:2px solid #1d232b;padding-bottom:4px}
h3{font-size:15px;margin:22px 0 6px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:#5b6673;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:10px;margin:4px 0 8px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
 vertical-align:-2px}
.legend i.pass{background:#fff;border:3px solid}
table.sched{border-collapse:collapse;background:#fff;width:100%}
table.sched td{border-top:1px solid #e3e6ea;padding:4px 6px;vertical-align:top}
table.sched td.lab{white-space:nowrap;font-weight:600;width:150px}
table.sched td.lab small{display:block;font-weight:400;color:#5b6673}
.chip{display:inline-block;margin:1px;padding:1px 5px;border-radius:3px;font-size:11px;
 color:#111;border:2px solid transparent;cursor:default}
.chip.fused{border-width:3px;font-weight:600}
.chip.op{border:2px dashed #333}
.chip.hl,.chip:hover{outline:2px solid #000}
.plot{background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:6px;overflow-x:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg rect.buf{stroke:#fff;stroke-width:.3}
svg rect.buf.out{stroke:#000;stroke-width:1}
svg rect.buf.hl{stroke:#000;stroke-width:2}
svg line.cursor{stroke:#d62728;stroke-width:1.5}
table.tab{border-collapse:collapse;background:#fff;font-size:12px}
table.tab th,table.tab td{border:1px solid #dde1e6;padding:3px 8px;text-align:left}
table.tab td.n{text-align:right;font-variant-numeric:tabular-nums}
table.tab td:nth-child(-n+4){white-space:nowrap}
pre{background:#fff;border:1px solid #d5dae1;padding:8px;overflow-x:auto;font-size:12px}
.note{color:#5b6673;font-size:12px}
"""

_JS = """
(function(){
  function all(sel){return Array.prototype.slice.call(document.querySelectorAll(sel));}
  function clear(){all('.hl').forEach(function(e){e.classList.remove('hl');});
    all('line.cursor').forEach(function(l){l.setAttribute('visibility','hidden');});}
  all('.chip').forEach(function(c){
    c.addEventListener('mouseenter',function(){
      clear();var g=c.dataset.g,t=c.dataset.t;
      all('rect.buf[data-g="'+g+'"][data-w="'+t+'"]').forEach(function(r){r.classList.add('hl');});
      all('line.cursor[data-g="'+g+'"]').forEach(function(l){
        var d=l.dataset;if(t*1<d.lo*1||t*1>d.hi*1)return;
        var x=d.x0*1+(t-d.lo)*d.dx+d.dx/2;
        l.setAttribute('x1',x);l.setAttribute('x2',x);l.setAttribute('visibility','visible');});
    });
    c.addEventListener('mouseleave',clear);
  });
  all('rect.buf').forEach(function(r){
    r.addEventListener('mouseenter',function(){
      clear();r.classList.add('hl');
      all('.chip[data-g="'+r.dataset.g+'"][data-t="'+r.dataset.w+'"]')
        .forEach(function(c){c.classList.add('hl');});
    });
    r.addEventListener('mouseleave',clear);
  });
  document.body.dataset.ready='1';
})();
"""


def category(name: str) -> tuple[str, str]:
    """``(category, colour)`` of a thunk or kernel name."""
    low = name.lower()
    for cat, colour, words in _CATEGORIES:
        if any(w in low for w in words):
            return cat, colour
    return _OTHER


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _nice_step(span: float, target: int) -> float:
    raw = max(span / max(target, 1), 1e-9)
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


# ---------------------------------------------------------------- sections
def _cards(g: GraphData) -> str:
    s = g.stats
    items = [
        (s["thunks"], "thunks"),
        (f"{s['dispatches_lowered']} → {s['dispatches']}", "dispatches before → after passes"),
        (_bytes(s["arena_bytes"]), f"arena (naive {_bytes(s['naive_bytes'])})"),
        (len(g.buffers), "arena buffers"),
        (_bytes(s["state_bytes"]), "state (KV cache …)"),
        (s["metal_dispatches"], "Metal dispatches"),
        (s["metal_barriers"], "Metal barriers"),
        (s["metal_host"], "Metal host commands"),
        (sum(1 for t in g.thunks if t.made_by), "thunks made by passes"),
    ]
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for v, k in items)
        + "</div>"
    )


def _pass_colours(g: GraphData) -> dict[str, str]:
    names = [p["name"] for p in g.stats.get("passes", [])]
    return {n: _PASS_COLOURS[i % len(_PASS_COLOURS)] for i, n in enumerate(names)}


def _legend(entries: Iterable[tuple[str, str]], cls: str = "") -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i class="{cls}" style="{"border-color" if cls else "background"}:{c}"></i>'
            f"{_e(n)}</span>"
            for n, c in entries
        )
        + "</div>"
    )


def _chip(t: ThunkRow, gid: str, pcol: dict[str, str]) -> str:
    _, colour = category(t.name)
    title = f"#{t.index} {t.text}" + (f"\nmade by {t.made_by}" if t.made_by else "")
    if t.made_by:
        style = f"background:{colour};border-color:{pcol.get(t.made_by, '#000')}"
        cls = "chip fused"
    else:
        style = f"background:{colour}"
        cls = "chip op" if _fused_op(t.name) else "chip"
        if _fused_op(t.name):
            title += "\nfused op (a graph fusion or the model builder)"
    return (
        f'<span class="{cls}" style="{style}" data-g="{gid}" data-t="{t.index}" '
        f'title="{_e(title)}">{_e(t.name)}</span>'
    )


def _fused_op(name: str) -> bool:
    """A kind that is several ops in one kernel by itself (graph fusions and
    builders make them; the thunk passes' own are marked by ``made_by``)."""
    return name.startswith(("fused_", "batch_elementwise")) or "region" in name


def _schedule(g: GraphData, gid: str) -> str:
    pcol = _pass_colours(g)
    by_layer: dict[str, list[ThunkRow]] = {name: [] for name in g.layers}
    for t in g.thunks:
        by_layer.setdefault(t.layer, []).append(t)
    groups: list[tuple[list[str], list[ThunkRow]]] = []
    for name in g.layers:
        rows = by_layer[name]
        sig = [(t.name, t.made_by) for t in rows]
        if groups and name.startswith("layer ") and groups[-1][0][0].startswith("layer "):
            prev = groups[-1][1]
            if [(t.name, t.made_by) for t in prev] == sig:
                groups[-1][0].append(name)
                continue
        groups.append(([name], rows))
    body = []
    for names, rows in groups:
        if len(names) == 1:
            label = _e(names[0])
        else:
            label = f"{_e(names[0])} – {_e(names[-1].split()[-1])}"
            label += f"<small>{len(names)} layers, same schedule (chips: {_e(names[0])})</small>"
        fused = sum(1 for t in rows if t.made_by)
        label += f"<small>{len(rows)} thunks, {fused} fused</small>"
        chips = "".join(_chip(t, gid, pcol) for t in rows)
        body.append(f'<tr class="layer"><td class="lab">{label}</td><td>{chips}</td></tr>')
    used_cats = {category(t.name) for t in g.thunks}
    cats = [(c, col) for c, col, _ in _CATEGORIES if (c, col) in used_cats]
    if _OTHER in used_cats:
        cats.append(_OTHER)
    used_passes = {t.made_by for t in g.thunks if t.made_by}
    passes = [(n, c) for n, c in pcol.items() if n in used_passes]
    legend = _legend(cats)
    marks = [(f"made by pass {n}", c) for n, c in passes]
    if any(_fused_op(t.name) and not t.made_by for t in g.thunks):
        marks.append(("fused op from the graph (dashed)", "#333"))
    if marks:
        legend += _legend(marks, "pass")
    return (
        f'<section class="schedule" id="schedule-{gid}"><h3>Schedule per layer</h3>'
        f'{legend}<table class="sched">{"".join(body)}</table></section>'
    )


def _lifetimes(g: GraphData, gid: str, lo: int, hi: int, ymax: int, zoom: bool) -> str:
    """The lifetime chart of the thunks ``lo..=hi`` and arena bytes
    ``0..ymax``: one rectangle per buffer live in that window."""
    n = hi - lo + 1
    left, top, width, height = 78, 26, 1140, 380 if not zoom else 300
    dx, dy = width / n, height / max(ymax, 1)
    out = [f'<svg class="lifetimes" width="{left + width + 10}" height="{top + height + 44}">']
    spans: dict[str, list[int]] = {}
    for t in g.thunks[lo : hi + 1]:
        spans.setdefault(t.layer, [t.index, t.index])[1] = t.index
    for k, (name, (a, b)) in enumerate(spans.items()):  # layer bands
        x = left + (a - lo) * dx
        fill = "#eef1f5" if k % 2 == 0 else "#f8f9fb"
        out.append(
            f'<rect x="{x:.2f}" y="{top}" width="{(b - a + 1) * dx:.2f}" '
            f'height="{height}" fill="{fill}"><title>{_e(name)}</title></rect>'
        )
        short = name.replace("layer ", "L")
        if (b - a + 1) * dx >= 7 * len(short):
            out.append(f'<text x="{x + 2:.1f}" y="{top - 6}">{_e(short)}</text>')
    ystep, v = _nice_step(ymax, 6), 0.0
    while v <= ymax:
        y = top + v * dy
        out.append(
            f'<line x1="{left - 4}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#d9dde3" stroke-width=".5"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_bytes(v)}</text>'
        )
        v += ystep
    xstep = max(1, int(_nice_step(n, 10)))
    for i in range(lo - lo % xstep, hi + 2, xstep):
        if i < lo:
            continue
        x = left + (i - lo) * dx
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + height}" y2="{top + height + 4}" '
            f'stroke="#555"/><text x="{x:.1f}" y="{top + height + 16}" '
            f'text-anchor="middle">{i}</text>'
        )
    out.append(
        f'<text x="{left + width / 2}" y="{top + height + 34}" text-anchor="middle">'
        "thunk index (schedule order)</text>"
        f'<text transform="translate(14 {top + height / 2}) rotate(-90)" '
        'text-anchor="middle">arena offset</text>'
    )
    for b in g.buffers:
        if b.last < lo or b.first > hi or b.offset >= ymax:
            continue
        _, colour = category(b.writer)
        a, e = max(b.first, lo), min(b.last, hi)
        x, y = left + (a - lo) * dx, top + b.offset * dy
        w, h = max((e - a + 1) * dx, 1.0), max(min(b.end, ymax) - b.offset, 0) * dy
        cls = ("buf out" if b.output else "buf") + (" zoom" if zoom else "")
        tip = (
            f"{_bytes(b.size)} at offset {b.offset}, thunks {b.first}–{b.last}, "
            f"written by #{b.first} {b.writer} ({b.layer})" + (", graph output" if b.output else "")
        )
        out.append(
            f'<rect class="{cls}" data-g="{gid}" data-w="{b.first}" x="{x:.2f}" '
            f'y="{y:.2f}" width="{w:.2f}" height="{max(h, 1.0):.2f}" fill="{colour}">'
            f"<title>{_e(tip)}</title></rect>"
        )
        if zoom and w > 7 * len(b.writer) and h >= 12:
            out.append(
                f'<text x="{x + 3:.1f}" y="{y + min(h, 24) / 2 + 4:.1f}" '
                f'pointer-events="none">{_e(b.writer)}</text>'
            )
    out.append(
        f'<line class="cursor" visibility="hidden" data-g="{gid}" data-x0="{left}" '
        f'data-dx="{dx:.4f}" data-lo="{lo}" data-hi="{hi}" '
        f'x1="0" x2="0" y1="{top}" y2="{top + height}"/>'
    )
    out.append(
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" '
        'stroke="#555"/></svg>'
    )
    return "".join(out)


def _arena(g: GraphData, gid: str) -> str:
    n = max(len(g.thunks), 1)
    arena = max([g.stats["arena_bytes"]] + [b.end for b in g.buffers] + [1])
    peak = max((b.end for b in g.buffers), default=0)
    note = (
        f'<p class="note">{len(g.buffers)} buffers; highest byte used {_bytes(peak)} of an '
        f"arena of {_bytes(g.stats['arena_bytes'])} (naive sum "
        f"{_bytes(g.stats['naive_bytes'])}). A rectangle spans the thunk that writes the "
        "buffer to the last that reads it; black outline: graph output. Colour: the kind "
        "of the thunk that writes it.</p>"
    )
    main = (
        f'<section class="arena" id="arena-{gid}"><h3>Arena lifetimes</h3>{note}'
        f'<div class="plot">{_lifetimes(g, gid, 0, n - 1, arena, False)}</div></section>'
    )
    # one layer up close (the second, past the first layer's input buffers)
    layers = [name for name in g.layers if name.startswith("layer ")]
    if not layers or len(g.thunks) < 40:
        return main
    pick = layers[1] if len(layers) > 1 else layers[0]
    idx = [t.index for t in g.thunks if t.layer == pick]
    lo, hi = idx[0], idx[-1]
    ymax = max((b.end for b in g.buffers if b.first <= hi and b.last >= lo), default=1)
    zoom = (
        f'<section class="arena-zoom" id="arena-zoom-{gid}"><h3>Arena lifetimes, {_e(pick)} '
        f'up close</h3><p class="note">Thunks {lo}–{hi}, the bytes below the highest buffer '
        f"live in them ({_bytes(ymax)}).</p>"
        f'<div class="plot">{_lifetimes(g, gid, lo, hi, ymax, True)}</div></section>'
    )
    return main + zoom


def _family(kernel: str) -> str:
    return kernel.split(":", 1)[0].removesuffix(".metal") if kernel else ""


def _metal(g: GraphData, gid: str) -> str:
    cmds = g.commands
    per_row = 160
    cw = max(7, min(20, 1120 // max(len(cmds), 1)))
    ch, gap = 16, 20
    rows = max(1, -(-len(cmds) // per_row))
    svg = [
        f'<svg id="metal-svg-{gid}" '
        f'width="{min(per_row, len(cmds)) * cw + 60}" height="{rows * (ch + gap) + 4}">'
    ]
    layer = ""
    for k, c in enumerate(cmds):
        r, col = divmod(k, per_row)
        x, y = 50 + col * cw, gap - 2 + r * (ch + gap)
        if col == 0:
            svg.append(f'<text x="44" y="{y + 12}" text-anchor="end">{k}</text>')
        here = g.thunks[c.thunk].layer if 0 <= c.thunk < len(g.thunks) else layer
        if here != layer:  # a layer starts: tick and name above the cell
            layer = here
            svg.append(
                f'<line x1="{x}" x2="{x}" y1="{y - 12}" y2="{y + ch}" stroke="#555" '
                f'stroke-width=".7"/><text x="{x + 2}" y="{y - 3}">'
                f"{_e(here.replace('layer ', 'L'))}</text>"
            )
        svg.append(_command_cell(c, g.thunks, x, y, cw, ch))
    svg.append("</svg>")
    kernels = Counter(c.kernel for c in cmds if c.kind in ("dispatch", "user"))
    hosts = Counter(
        g.thunks[c.thunk].name for c in cmds if c.kind == "host" and 0 <= c.thunk < len(g.thunks)
    )
    runs, cur = [], 0
    for c in cmds:
        if c.kind in ("dispatch", "user"):
            cur += 1
        else:
            if cur:
                runs.append(cur)
            cur = 0
    if cur:
        runs.append(cur)
    fams = sorted({_family(c.kernel) for c in cmds if c.kind == "dispatch"})
    legend = _legend(
        [(f, category(f)[1]) for f in fams]
        + [("barrier", "#d62728"), ("host command / check", "#000")]
    )
    rows_html = "".join(
        f'<tr><td>{_e(k)}</td><td class="n">{v}</td></tr>' for k, v in kernels.most_common()
    )
    host_html = "".join(
        f'<tr><td>host: {_e(k)}</td><td class="n">{v}</td></tr>' for k, v in hosts.most_common()
    )
    mean = sum(runs) / len(runs) if runs else 0.0
    note = (
        f'<p class="note">{len(cmds)} commands in order: '
        f"{g.stats['metal_dispatches']} dispatches, {g.stats['metal_barriers']} barriers, "
        f"{g.stats['metal_host']} host commands. Barriers come from byte-range hazards; "
        f"the dispatches between two of them may run concurrently: {len(runs)} runs, "
        f"{mean:.1f} dispatches per run on average, longest {max(runs, default=0)}. "
        "Ticks mark where a layer's commands begin. "
        'This is the plan <code>device="metal"</code> and <code>"metal-sim"</code> '
        "run.</p>"
    )
    return (
        f'<section class="metal" id="metal-{gid}"><h3>Metal plan</h3>{note}{legend}'
        f'<div class="plot">{"".join(svg)}</div>'
        f'<table class="tab"><tr><th>kernel (file:function)</th><th>dispatches</th></tr>'
        f"{rows_html}{host_html}</table></section>"
    )


def _command_cell(c: Command, thunks: list[ThunkRow], x: float, y: float, w: int, h: int) -> str:
    what = thunks[c.thunk].text if 0 <= c.thunk < len(thunks) else ""
    if c.kind == "barrier":
        return (
            f'<rect class="cmd barrier" x="{x + w / 2 - 1.5}" y="{y - 2}" width="3" '
            f'height="{h + 4}" fill="#d62728"><title>barrier</title></rect>'
        )
    if c.kind in ("host", "check"):
        tip = f"{c.kind} #{c.thunk} {what}"
        fill = "#000"
    else:
        tip = f"dispatch #{c.thunk} {c.kernel} grid={list(c.grid)} tg={list(c.threadgroup)}\n{what}"
        fill = category(_family(c.kernel) or c.kernel)[1]
    return (
        f'<rect class="cmd {c.kind}" x="{x}" y="{y}" width="{w - 1}" height="{h}" '
        f'fill="{fill}"><title>{_e(tip)}</title></rect>'
    )


def _kinds(d: dict[str, int]) -> str:
    return ", ".join(f"{v}× {k}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])) or "–"


def _passes(g: GraphData, gid: str) -> str:
    s = g.stats
    rows = []
    for name, enabled, matches, before, after in s.get("graph_passes", []):
        state = str(matches) if enabled else "disabled"
        rows.append(
            f'<tr><td>{_e(name)}</td><td>graph fusion</td><td class="n">{state}</td>'
            f'<td class="n">{before} → {after} nodes</td>'
            "<td colspan=2>"
            + ("fused IR ops, each lowered to one thunk" if matches > 0 else "–")
            + "</td></tr>"
        )
    pcol = _pass_colours(g)
    for p in s.get("passes", []):
        state = str(p["matches"]) if p["enabled"] else "disabled"
        swatch = (
            f'<i style="display:inline-block;width:10px;height:10px;'
            f'background:{pcol[p["name"]]}"></i> '
        )
        rows.append(
            f'<tr><td>{swatch}{_e(p["name"])}</td><td>thunk pass</td><td class="n">{state}</td>'
            f'<td class="n">{p["thunks_before"]} → {p["thunks_after"]}</td>'
            f"<td>{_e(_kinds(p.get('removed', {})))}</td>"
            f"<td>{_e(_kinds(p.get('made', {})))}</td></tr>"
        )
    table = (
        '<table class="tab"><tr><th>pass</th><th>level</th><th>matches</th>'
        "<th>thunks before → after</th><th>removed</th><th>made</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    return (
        f'<section class="passes" id="passes-{gid}"><h3>Pass report</h3>{table}'
        f"<pre>{_e(g.pass_text)}</pre></section>"
    )


def _graph_section(g: GraphData, gid: str) -> str:
    return (
        f'<section class="graph" id="graph-{gid}"><h2>{_e(g.title)}</h2>{_cards(g)}'
        f"{_schedule(g, gid)}{_arena(g, gid)}{_metal(g, gid)}{_passes(g, gid)}"
        "</section>"
    )


def render(
    title: str, subtitle: str, graphs: list[tuple[str, GraphData]], extra: Optional[str] = None
) -> str:
    """The page: ``graphs`` are ``(id, data)`` pairs (ids are used in element
    ids: letters and digits); ``extra`` is trusted HTML appended at the end."""
    nav = "".join(f'<a href="#graph-{_e(gid)}">{_e(g.title)}</a>' for gid, g in graphs)
    body = "".join(_graph_section(g, gid) for gid, g in graphs)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_e(title)}</h1><p>{_e(subtitle)}</p></header><nav>{nav}</nav>"
        f"<main>{body}{extra or ''}</main>"
        f"<script>{_JS}</script></body></html>"
    )
