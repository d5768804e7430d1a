"""Find a dataset file locally, or download it once from its canonical URL and check its checksum.

Lookup order for ``resolve_data_file``: the data directory (``paths.data_dir``, by default the
``TREERNN_DATA_DIR`` environment variable), then the download cache (``TREERNN_CACHE_DIR``, default
``~/.cache/treernn``), then a download into the cache. Offline and missing, it raises
`DatasetNotFoundError` naming the files, the URL and the directory to put them in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from treernn.errors import DataError


class DatasetNotFoundError(DataError, FileNotFoundError):
    """A dataset file is neither on disk nor downloadable."""


class ChecksumError(DataError, ValueError):
    """A file's checksum does not match the published one."""


def default_data_dir() -> Path:
    return Path(os.environ.get("TREERNN_DATA_DIR", "data")).expanduser()


def cache_dir() -> Path:
    return Path(os.environ.get("TREERNN_CACHE_DIR", "~/.cache/treernn")).expanduser()


def file_digest(path: Path, algorithm: str) -> str:
    """sha256/md5 of a file, or ``git`` for its git blob id (``git hash-object``)."""
    if algorithm == "git":
        digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: where it lives under the dataset folder and where to get it."""

    relpath: str  # e.g. "ptb.train.txt"
    url: str
    sha256: str | None = None
    md5: str | None = None
    git_blob: str | None = None
    #: member to extract when ``url`` is a .tgz/.tar.gz archive
    archive_member: str | None = None

    def verify(self, path: Path) -> None:
        for algorithm, expected in (
            ("sha256", self.sha256),
            ("md5", self.md5),
            ("git", self.git_blob),
        ):
            if expected and file_digest(path, algorithm) != expected:
                raise ChecksumError(
                    f"{path} fails its {algorithm} check (expected {expected}); it was not used. "
                    f"Replace it with the file from {self.url} (or turn the check off with "
                    "task.datamodule.verify_checksums=false if you changed it on purpose)"
                )


def fetch(remote: RemoteFile, dest: Path) -> Path:
    """Download ``remote`` to ``dest`` atomically and verify it; a bad file is deleted."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        download = Path(tmp) / "download"
        with (
            urllib.request.urlopen(remote.url, timeout=60) as response,
            open(download, "wb") as out,
        ):
            shutil.copyfileobj(response, out)
        if remote.archive_member:
            with tarfile.open(download) as archive:
                member = archive.extractfile(remote.archive_member)
                if member is None:
                    raise DatasetNotFoundError(
                        f"{remote.url} has no member {remote.archive_member}"
                    )
                extracted = Path(tmp) / "member"
                with open(extracted, "wb") as out:
                    shutil.copyfileobj(member, out)
            download = extracted
        remote.verify(download)
        os.replace(download, dest)
    return dest


_VERIFIED: dict[tuple[Path, int, int], bool] = {}


def verify_once(remote: RemoteFile, path: Path) -> None:
    """``remote.verify(path)``, remembered per file size and modification time in this process."""
    stat = path.stat()
    key = (path.resolve(), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        remote.verify(path)
        _VERIFIED[key] = True


def resolve_data_file(
    dataset: str,
    remote: RemoteFile,
    data_dir: str | Path | None = None,
    download: bool = True,
    verify: bool = True,
) -> Path:
    """Return a verified local path for one file of ``dataset`` (a folder name such as ``ptb``).

    Local files are checked against the published checksum too (``verify=False`` skips that for
    files changed on purpose)."""
    data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
    local = data_dir / dataset / remote.relpath
    if local.is_file():
        if verify:
            verify_once(remote, local)
        return local
    cached = cache_dir() / dataset / remote.relpath
    if cached.is_file():
        if verify:
            verify_once(remote, cached)
        return cached
    error = None
    if download:
        try:
            return fetch(remote, cached)
        except ChecksumError:
            raise
        except Exception as exc:  # offline, DNS failure, HTTP error, ...
            error = exc
    raise DatasetNotFoundError(
        f"{dataset}: {remote.relpath} not found in {data_dir / dataset} "
        f"and it could not be downloaded from {remote.url} ({error}). Put the file at "
        f"{local} (or set TREERNN_DATA_DIR / paths.data_dir to the folder that holds {dataset}/)."
    )
