"""``rlx inspect MODEL --html``: the page is rendered in headless Chromium
(installed by scripts/setup.sh through scripts/install_chromium.sh; without
it these tests fail, they do not skip).

What is checked on a tiny llama GGUF fixture (decode + an 8-token prefill):
the screenshot is a PNG of the requested size with the chart colours in it
and not a blank page; the DOM after the scripts ran has the four sections
per graph, one ``rect.buf`` per arena buffer, one chip per thunk and one
Metal-plan cell per command; the page names no http(s) URL in any
attribute or style, and Chromium's network log shows no request from the
page (checked on the page with its Content-Security-Policy removed, so the
page itself is tested rather than the policy; a control page with one
external image shows the log check can fail). Independent of the page:
the arena buffers derived from the schedule never share bytes while both
live and fit in the planner's arena.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
from rlx import cli
from rlx.report import data as rdata
from rlx.report.html import category

FIXTURE = Path(__file__).parent / "fixtures" / "gguf" / "llama-f16.gguf"
SIZE = (1280, 2400)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("chromium not found: run scripts/setup.sh (scripts/install_chromium.sh)")


def _run_chromium(tmp: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        # every network request goes to a closed local port, so none can succeed
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
        f"--user-data-dir={tmp / 'profile'}",
        "--virtual-time-budget=3000",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page asked for (not Chromium's own background requests):
    request jobs whose network isolation key is the page's file:// site."""
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for e in log["events"]:
        p = e.get("params", {})
        if e["type"] == start and "file://" in str(p.get("network_isolation_key", "")):
            if not str(p.get("url", "")).startswith("file:"):
                urls.append(p["url"])
    return urls


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("report")
    page = tmp / "report.html"
    exes: list[Any] = []
    info = cli.inspect_model(str(FIXTURE), 8, None, exes)
    assert cli.main(["inspect", str(FIXTURE), "--seq", "8", "--html", str(page)]) == 0
    graphs = [rdata.collect(exe, g["graph"]) for g, exe in zip(info["graphs"], exes)]
    return {"tmp": tmp, "page": page, "text": page.read_text(encoding="utf-8"), "graphs": graphs}


def test_buffers_never_share_live_bytes(report: dict[str, Any]) -> None:
    for g in report["graphs"]:
        assert g.buffers, g.title
        assert rdata.overlaps(g.buffers) == []
        assert max(b.end for b in g.buffers) <= g.stats["arena_bytes"]
        assert all(0 <= b.first <= b.last < len(g.thunks) for b in g.buffers)
        assert any(b.output for b in g.buffers)  # the logits live to the end


def test_overlap_check_can_fail() -> None:
    a = rdata.Buffer(0, 64, 0, 5, "x", "input")
    b = rdata.Buffer(32, 64, 3, 7, "y", "input")
    c = rdata.Buffer(0, 64, 5, 9, "z", "input")  # in-place handoff at thunk 5
    assert rdata.overlaps([a, b]) == [(a, b)]
    assert rdata.overlaps([a, c]) == []


def test_layers_and_fused_thunks(report: dict[str, Any]) -> None:
    decode = report["graphs"][0]
    layers = [name for name in decode.layers if name.startswith("layer ")]
    assert layers == [f"layer {i}" for i in range(len(layers))] and len(layers) >= 2
    assert decode.layers[-1] == "output"
    made = {t.made_by for t in decode.thunks if t.made_by}
    matched = {p["name"] for p in decode.stats["passes"] if p["matches"] > 0}
    assert made and made <= matched
    for p in decode.stats["passes"]:
        n = sum(1 for t in decode.thunks if t.made_by == p["name"])
        assert n <= sum(p["made"].values())


def test_page_has_no_external_urls(report: dict[str, Any]) -> None:
    text = report["text"]
    assert not re.search(r"https?://", text), re.findall(r"https?://[^\s\"'<>]*", text)

    class Links(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.links: list[str] = []
            self.tags: set[str] = set()

        def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
            self.tags.add(tag)
            for k, v in attrs:
                if k in ("src", "href", "xlink:href", "action", "data", "poster", "srcset"):
                    self.links.append(v or "")

    p = Links()
    p.feed(text)
    assert p.links and all(v.startswith("#") for v in p.links), p.links  # in-page anchors only
    assert not p.tags & {"link", "img", "iframe", "object", "embed", "audio", "video", "base"}
    assert "@import" not in text and "url(" not in text


def test_rendered_in_chromium(report: dict[str, Any]) -> None:
    from PIL import Image

    tmp, page = report["tmp"], report["page"]
    # the page without its CSP: the content itself must not ask the network
    bare = tmp / "bare.html"
    bare.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", report["text"]),
        encoding="utf-8",
    )
    shot, netlog = tmp / "shot.png", tmp / "net.json"
    _run_chromium(
        tmp,
        bare,
        f"--screenshot={shot}",
        f"--window-size={SIZE[0]},{SIZE[1]}",
        f"--log-net-log={netlog}",
    )
    assert _page_requests(netlog) == []
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape == (SIZE[1], SIZE[0], 3)
    colours = {
        tuple(int(c[i : i + 2], 16) for i in (1, 3, 5))
        for c in (category(t.name)[1] for g in report["graphs"] for t in g.thunks)
    }
    flat = img.reshape(-1, 3)
    seen = {c for c in colours if np.all(flat == c, axis=1).any()}
    assert len(seen) >= 3, (seen, colours)
    assert len(np.unique(flat[::97], axis=0)) > 20  # not a blank / one-colour page

    dom = _run_chromium(tmp, page, "--dump-dom").stdout
    assert 'data-ready="1"' in dom  # the script ran
    for g, gid in zip(report["graphs"], ("decode", "prefill")):
        for section in ("schedule", "arena", "metal", "passes"):
            assert f'id="{section}-{gid}"' in dom
        arena = dom.split(f'id="arena-{gid}"', 1)[1].split("</section>", 1)[0]
        assert arena.count('class="buf') == len(g.buffers)
        metal = dom.split(f'id="metal-{gid}"', 1)[1].split("</section>", 1)[0]
        assert metal.count('class="cmd ') == len(g.commands)
        sched = dom.split(f'id="schedule-{gid}"', 1)[1].split("</section>", 1)[0]
        assert all(f">{t.name}</span>" in sched for t in g.thunks)
        fused = [t for t in g.thunks if t.made_by]
        n_fused = sched.count('class="chip fused"')
        assert n_fused >= len({t.name for t in fused})
        assert n_fused > 0 or gid == "prefill"  # fuse_decode_mlp fires on decode


def test_network_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><img src="http://192.0.2.1/x.png">', encoding="utf-8")
    netlog = tmp_path / "net.json"
    _run_chromium(tmp_path, page, "--dump-dom", f"--log-net-log={netlog}")
    assert _page_requests(netlog) == ["http://192.0.2.1/x.png"]
