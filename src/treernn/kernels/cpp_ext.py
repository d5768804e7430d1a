"""C++ extensions of the encoders, compiled on first use.

`load_extension` compiles ``csrc/<name>.cpp`` (shipped with the package) with
``torch.utils.cpp_extension.load`` the first time a process asks for it, and returns the module,
or None where it cannot be had; the caller then runs its torch-ops path, which computes the same
numbers more slowly. Builds are kept in ``$TREERNN_CACHE_DIR/cpp_ext/<torch version>/``
(default ``~/.cache/treernn``), one directory per hash of the source and the headers beside it,
Python version and flags, so an edited source rebuilds. A build that finished is stamped (the
library's size and modification time, in ``ready`` beside it), and later processes import a
stamped library directly (about 1 ms per extension) without ``cpp_extension.load``, whose ninja
run recompiles (about 10 s per extension on 2 cores) whenever the build file it rewrites names the
source by another path than the last build did (another checkout or worktree of the same source,
a copy of the repository on a cluster node) and which imports setuptools and runs ninja even
when nothing changed. The flags are portable (``-O3`` and ``-fno-trapping-math``, no
``-march=native``): a cache shared by machines with different CPUs stays valid, and the sources
pick their vector instructions at run time.

Processes building the same extension at once take turns through an exclusive ``flock`` on
``build.lock`` in its directory, which the system releases when a process dies. Torch's own
marker (a file ``lock`` that its builder deletes when done) is left behind by a builder that was
killed, and every later ``cpp_extension.load`` would wait for it forever; whoever holds
``build.lock`` knows that no build is running and removes such a marker first.

``TREERNN_CPP_EXT=0`` turns the extensions off (every caller then runs its torch-ops path).
Building needs a C++ compiler and ``ninja`` (a dependency of this package).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

ENV_VAR = "TREERNN_CPP_EXT"
SOURCE_DIR = Path(__file__).resolve().parent / "csrc"
# -fno-trapping-math changes no result (it says that floating-point exceptions never trap) and lets
# the compiler vectorise loops with clamps and float -> int conversions
CFLAGS = ("-O3", "-fno-trapping-math")
# at::parallel_for splits the kernels' rows over torch's OpenMP threads only in code compiled with
# OpenMP (without it, it runs the whole range on the calling thread). The extension then links the
# libgomp.so.1 that torch has already loaded (same soname), so there is one thread pool.
# Tuples, and lists made afresh for each build: cpp_extension.load appends torch's own link flags
# to the list it is given, which changed the flags hashed into the build directory of every later
# extension in the process (each then rebuilt in a directory of its own, 10 s or more).
OPENMP_FLAGS = (
    ("-fopenmp",)
    if torch.backends.openmp.is_available() and sys.platform.startswith("linux")
    else ()
)

#: name -> the loaded module, or None after a build that failed (not retried in this process)
_LOADED: dict[str, ModuleType | None] = {}
#: not empty once the extensions' being turned off has been logged
_SAID_OFF: set[str] = set()


def enabled() -> bool:
    """False when ``TREERNN_CPP_EXT`` is ``0`` (or ``false``, ``no``, ``off``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def build_directory(name: str, source: Path) -> Path:
    """Where ``name`` is built: one directory per torch version, and below it per hash of the
    source and the shared headers, Python version and flags."""
    digest = hashlib.sha256(source.read_bytes())
    for header in sorted(source.parent.glob("*.h")):
        digest.update(header.read_bytes())
    digest.update(f"{sys.version_info[:2]} {list(CFLAGS)} {list(OPENMP_FLAGS)}".encode())
    root = Path(os.environ.get("TREERNN_CACHE_DIR", "~/.cache/treernn")).expanduser()
    return root / "cpp_ext" / torch.__version__ / f"{name}-{digest.hexdigest()[:16]}"


def load_extension(name: str) -> ModuleType | None:
    """The compiled module of ``csrc/<name>.cpp``, or None (with one warning saying why) when it
    cannot be built here; None (said once at INFO level) when ``TREERNN_CPP_EXT=0``."""
    if not enabled():
        if not _SAID_OFF:  # once per process, for every extension
            _SAID_OFF.add(name)
            log.info("C++ extensions off (%s=0): the torch-ops paths are used.", ENV_VAR)
        return None
    if name not in _LOADED:
        directory = build_directory(name, SOURCE_DIR / f"{name}.cpp")
        _LOADED[name] = _load_stamped(name, directory) or _build(name, directory)
    return _LOADED[name]


def _library(name: str, directory: Path) -> Path:
    """The library ``cpp_extension.load`` links for ``name`` in ``directory``."""
    return directory / f"treernn_{name}{'.pyd' if sys.platform == 'win32' else '.so'}"


def _stamp_of(library: Path) -> str:
    status = library.stat()
    return f"{status.st_size} {status.st_mtime_ns}"


def _load_stamped(name: str, directory: Path) -> ModuleType | None:
    """The library of a finished build in ``directory``, imported directly, or None where there is
    none (no stamp, or a library changed since it was stamped) or it does not import."""
    started = time.perf_counter()
    library = _library(name, directory)
    try:
        if (directory / "ready").read_text() != _stamp_of(library):
            return None
        spec = importlib.util.spec_from_file_location(f"treernn_{name}", library)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError) as error:
        log.debug("C++ extension %s: no stamped build in %s (%s)", name, directory, error)
        return None
    log.debug(
        "C++ extension %s imported in %.3f s (%s)", name, time.perf_counter() - started, directory
    )
    return module


def _stamp(name: str, directory: Path) -> None:
    """Mark the build in ``directory`` as finished (written to a temporary file, then renamed, so
    that a process reading it never sees half a stamp)."""
    try:
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as handle:
            handle.write(_stamp_of(_library(name, directory)))
        os.replace(handle.name, directory / "ready")
    except OSError as error:  # a read-only cache: the next process goes through ninja again
        log.debug("C++ extension %s: could not stamp %s (%s)", name, directory, error)


def _build(name: str, directory: Path) -> ModuleType | None:
    from torch.utils import cpp_extension

    source = SOURCE_DIR / f"{name}.cpp"
    fallback = "the slower torch-ops path (and the library GEMMs) is used instead"
    missing = _missing_tool()
    if missing:
        log.warning("C++ extension %s not built: %s; %s.", name, missing, fallback)
        return None
    started = time.perf_counter()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with build_lock(directory):
            module = cpp_extension.load(
                name=f"treernn_{name}",
                sources=[str(source)],
                extra_cflags=[*CFLAGS, *OPENMP_FLAGS],
                extra_ldflags=[*OPENMP_FLAGS],
                build_directory=str(directory),
            )
            _stamp(name, directory)
    except (OSError, RuntimeError, ImportError, subprocess.CalledProcessError) as error:
        log.warning(
            "C++ extension %s failed to build in %s (%s); %s.",
            name,
            directory,
            _reason(error),
            fallback,
        )
        log.debug("C++ extension %s build output:\n%s", name, error)
        return None
    log.info(
        "C++ extension %s ready in %.1f s (%s)", name, time.perf_counter() - started, directory
    )
    return module


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold the exclusive build lock of ``directory``, with torch's stale ``lock`` marker gone."""
    with open(directory / "build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            marker = directory / "lock"
            if marker.exists():  # no build runs (we hold the lock): a killed builder left it
                log.info("C++ extension build: removing the stale %s of a killed build", marker)
                marker.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _reason(error: BaseException) -> str:
    """The first line of a build error and its compiler's first ``error:`` lines (torch puts the
    whole compiler output in the exception; the debug log has it all)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    errors = [line for line in lines[1:] if "error:" in line][:2]
    first = lines[0].split(": [", 1)[0]  # ninja's progress line follows with the whole command
    return " | ".join([first, *errors])


def _missing_tool() -> str | None:
    """What stops a build here (no ninja, no C++ compiler), or None."""
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        try:  # the ninja wheel's binary, where its scripts directory is not on PATH
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass
        if not cpp_extension.is_ninja_available():
            return "ninja is not installed (pip install ninja)"
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler {compiler!r} on PATH (install g++ or set CXX)"
    return None
