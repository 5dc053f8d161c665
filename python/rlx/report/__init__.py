"""Pictures of what the compiler did: ``rlx inspect MODEL --html FILE``
writes one self-contained HTML page (:mod:`rlx.report.html`) from the data
:mod:`rlx.report.data` reads off the compiled executables."""

from __future__ import annotations

import os
from typing import Any

from rlx.report.data import GraphData, collect
from rlx.report.html import render

__all__ = ["GraphData", "collect", "render", "write_html"]


def _quant_table(errs: dict[str, float], scheme: Any) -> str:
    import html

    rows = "".join(
        f'<tr><td>{html.escape(k)}</td><td class="n">{v:.3e}</td></tr>' for k, v in errs.items()
    )
    return (
        f'<section class="graph"><h2>Quantised to {html.escape(str(scheme))}</h2>'
        '<table class="tab"><tr><th>weight</th><th>‖dequant(W) − W‖ / ‖W‖</th></tr>'
        f"{rows}</table></section>"
    )


def write_html(info: dict[str, Any], exes: list[Any], path: str | os.PathLike[str]) -> None:
    """Write the report of ``info`` (what :func:`rlx.cli.inspect_model`
    returns) whose ``graphs`` were compiled into ``exes`` (same order)."""
    graphs = []
    for g, exe in zip(info["graphs"], exes):
        what = "token" if g["tokens"] == 1 else "tokens"
        title = f"{g['graph']} graph: {g['tokens']} new {what}, {g['cache_slots']} cache slots"
        graphs.append((g["graph"], collect(exe, title)))
    sub = f"{info['arch']}, {info['layers']} layers, hidden {info['hidden']}"
    if info.get("quantize"):
        sub += f", weights quantised to {info['quantize']}"
    extra = _quant_table(info["quant_errors"], info["quantize"]) if info["quant_errors"] else None
    page = render(f"rlx inspect: {os.path.basename(str(info['model']))}", sub, graphs, extra)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
