"""Writing a file so that a kill or a full disk never leaves it half-written: into a temporary
file beside it, flushed to disk, then renamed into place; a full disk is one line that names the
file (`treernn.errors.StorageError`). Checkpoints, status records, metrics and generated
data are all written this way. Nothing here imports torch or Lightning (``python -m treernn sweep
status`` and ``report`` use it without them)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from treernn.errors import StorageError

#: errno values that mean "no room to write"
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def is_full_disk(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in FULL_DISK


def full_disk_error(path: str | Path, error: OSError, kept: str) -> StorageError:
    return StorageError(
        f"cannot write {path}: {os.strerror(error.errno)}; {kept}. Free some space (or set "
        "paths.log_dir to a disk with room), then resume with ckpt_path=last"
    )


def atomic_write(path: str | Path, write: Any, kept: str = "the previous file is kept") -> None:
    """Write ``path`` through ``write(handle)`` into a temporary file beside it, flush it to disk
    and rename it into place. On a full disk the temporary file is removed and a
    `StorageError` names the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if is_full_disk(error):
            raise full_disk_error(path, error, kept) from None
        raise
