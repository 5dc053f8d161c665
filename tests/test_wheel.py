"""Packaging: the abi3 wheel ``maturin build --release`` makes installs into a
fresh virtualenv (no source tree on the path, run from a temporary working
directory) and ``rlx generate`` runs from it.

The test builds the wheel itself (``maturin build --release`` into a
temporary directory, reusing the cargo target directory of setup.sh's
``maturin develop --release``), also under ``scripts/test.sh``, which sets
nothing; ``RLX_WHEEL=path/to/rlx-….whl`` tests a wheel built elsewhere
instead.

``pip install`` of the wheel must pull exactly the runtime dependencies of
pyproject.toml (``[project] dependencies``), not the ``serve`` / ``test``
extras: the wheel's ``Requires-Dist`` is checked against pyproject.toml, and
the fresh venv against the closure of that set (no starlette / uvicorn /
pytest / ruff / mypy / maturin). The greedy output of ``rlx generate`` from
the wheel equals the one of the development install (same model, same
prompt).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LLAMA = ROOT / "tests" / "fixtures" / "gguf" / "llama-q8_0.gguf"
#: distributions that belong to the extras or the dev tools, never to a plain install
NOT_RUNTIME = ("starlette", "uvicorn", "pytest", "ruff", "mypy", "maturin", "openai", "scipy")

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the CI interpreter)


def _name(req: str) -> str:
    """The normalised distribution name of a requirement string."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the source tree or
    the development venv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("RLX_WHEEL")
    if given:
        p = Path(given)
        assert p.is_file(), f"RLX_WHEEL={given} is not a file"
        return p
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    if not Path(maturin).exists():
        pytest.skip("maturin is not installed (scripts/setup.sh installs it)")
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [maturin, "build", "--release", "--quiet", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (whl,) = out.glob("rlx-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (its dependencies from the
    package index / the local wheel cache)."""
    d = tmp_path_factory.mktemp("venv") / "v"
    env = _clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, env=env, timeout=300)
    py = d / "bin" / "python"
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=d,
        timeout=900,
    )
    if r.returncode != 0 and "NewConnectionError" in r.stderr + r.stdout:
        pytest.skip(f"no package index reachable: {r.stderr[-500:]}")
    assert r.returncode == 0, r.stderr[-4000:]
    return d


def test_wheel_is_abi3_and_declares_the_runtime_dependencies(wheel: Path) -> None:
    assert re.search(r"-cp39-abi3-[^-]+\.whl$", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    # the package and the native module, nothing from tests/ or crates/
    assert "rlx/__init__.py" in names and any(re.match(r"rlx/_rlx\.abi3\.so$", n) for n in names)
    assert not any(n.startswith(("tests/", "crates/")) for n in names), names
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    reqs = re.findall(r"^Requires-Dist: (.+)$", text, re.M)
    plain = {_name(r) for r in reqs if "extra ==" not in r}
    assert plain == runtime, (plain, runtime)
    extras = {_name(r) for r in reqs if "extra ==" in r}
    declared = {_name(r) for e in project["optional-dependencies"].values() for r in e}
    assert extras == declared, (extras, declared)
    assert "Provides-Extra: serve" in text


def test_install_pulls_only_the_runtime_dependencies(venv: Path) -> None:
    py = venv / "bin" / "python"
    r = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m; "
         "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
        capture_output=True, text=True, env=_clean_env(), timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    installed = {_name(n) for n in r.stdout.split()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(x) for x in project["dependencies"]}
    assert runtime <= installed, runtime - installed
    assert not installed & set(NOT_RUNTIME), installed & set(NOT_RUNTIME)


def test_rlx_generate_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """``rlx generate`` from the installed wheel, in a directory without the
    source tree: the module comes from the venv, the text equals the
    development install's (greedy, 6 tokens)."""
    env = _clean_env()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rlx, rlx._rlx; print(rlx.__file__)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    r = subprocess.run(
        [str(venv / "bin" / "rlx"), "generate", str(LLAMA), "-p", "hello", "-n", "6"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    import rlx

    want = "".join(rlx.load(str(LLAMA)).generate("hello", max_tokens=6))
    assert r.stdout == want + "\n"
    assert len(want) > 0
