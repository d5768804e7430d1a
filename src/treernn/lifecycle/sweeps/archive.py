"""Keeping a sweep and handing it on: ``sweep archive`` copies a sweep's records and results
without its weights (a finished job's checkpoints are left out; an unfinished one keeps its
newest and best checkpoints, with ``--unfinished``), and ``sweep restore`` copies back what a
sweep directory lacks. An archive is data: links, names that leave the target, and a recorded
command that a resumed sweep would refuse (`treernn.lifecycle.sweeps.layout.check_passed_on`) are
refused before anything is copied, and nothing in it runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from treernn.errors import UserError
from treernn.lifecycle import runs
from treernn.lifecycle.records import DAMAGED, RunState, status_for_listing
from treernn.lifecycle.sweeps.layout import (
    check_passed_on,
    job_dirs,
    recorded_overrides,
    refuse_links,
    saved_multirun,
)

#: what an archive leaves out: weights (checkpoints, SLURM's requeue checkpoints), wandb's own
#: files (synced from the run directory), and the run's lock
NOT_ARCHIVED = ("checkpoints", "wandb", "*.ckpt", ".lock")


def archive_sweep(sweep_dir: Path, target: Path, unfinished: bool = False) -> int:
    """Copy ``sweep_dir``'s own files and its finished jobs (with ``unfinished``, its unfinished
    jobs that have a checkpoint too) into ``target``; print what was archived and what was not.
    Returns the exit status: 1 where a job's record is damaged."""
    saved_multirun(sweep_dir)
    check_copy_target(sweep_dir, target, "archive")
    refuse_links(sweep_dir, "sweep archive")
    ignore = shutil.ignore_patterns(*NOT_ARCHIVED)
    target.mkdir(parents=True, exist_ok=True)
    for path in sweep_dir.iterdir():  # the sweep's own files: multirun.yaml, table.*, curves.*
        if path.is_file() and not path.name.startswith("."):
            shutil.copy2(path, target / path.name)
    kept, resumable, left, damaged = [], [], [], []
    for job_dir in job_dirs(sweep_dir):
        copy = target / job_dir.name
        status = status_for_listing(job_dir).get("status")
        if status == DAMAGED:
            damaged.append(job_dir.name)
            continue
        finished = status == RunState.FINISHED
        checkpoint = (
            None if finished or not unfinished else runs.newest_complete_checkpoint(job_dir)[0]
        )
        if not finished and checkpoint is None:
            left.append(job_dir.name)
            continue
        shutil.copytree(job_dir, copy, symlinks=True, ignore=ignore, dirs_exist_ok=True)
        if finished:
            _keep_checkpoint(copy)  # one kept while it ran is no longer needed
            kept.append(job_dir.name)
        else:
            _keep_checkpoint(copy, checkpoint.path, job_dir, runs.best_file(checkpoint, job_dir))
            resumable.append(f"{job_dir.name} (step {checkpoint.global_step})")
    print(f"archived {len(kept)} finished jobs of {sweep_dir} in {target}", flush=True)
    if resumable:
        print(
            "archived unfinished, with their newest and best checkpoints: jobs "
            f"{', '.join(resumable)}"
        )
    if left:
        print(f"not archived (not finished): jobs {', '.join(left)}", flush=True)
    if damaged:
        print(
            f"not archived (damaged status.json; python -m treernn sweep status {sweep_dir} says "
            f"what is wrong): jobs {', '.join(damaged)}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


def check_copy_target(source: Path, target: Path, action: str) -> None:
    """An archive or restore target that is a file, the source itself, or inside the source
    (which the copy would copy into itself): one line."""
    if target.exists() and not target.is_dir():
        raise UserError(f"sweep {action}: {target} is a file; give a directory to copy into")
    source, resolved = source.resolve(), target.resolve()
    if resolved == source or source in resolved.parents or resolved in source.parents:
        raise UserError(
            f"sweep {action}: {target} and {source} overlap (one is inside the other); give a "
            "directory outside the sweep, e.g. results/<table>/<name>"
        )


def _keep_checkpoint(
    copy: Path,
    checkpoint: Path | None = None,
    job_dir: Path | None = None,
    best: Path | None = None,
) -> None:
    """Leave in a job's ``copy`` only ``checkpoint`` and ``best`` (files of ``job_dir``), or none;
    a kept copy that is already that file (same size and time: copy2 keeps them) is not copied
    again, so that archiving every few minutes does not rewrite an unchanged checkpoint."""
    sources = [path for path in (checkpoint, best) if path is not None]
    wanted = {copy / path.relative_to(job_dir): path for path in sources}
    for path in [*copy.glob("checkpoints/*.ckpt"), *copy.glob("hpc_ckpt_*.ckpt")]:
        if path not in wanted:
            path.unlink()
    if not wanted:
        if (copy / "checkpoints").is_dir() and not any((copy / "checkpoints").iterdir()):
            (copy / "checkpoints").rmdir()
        return

    def signature(path: Path) -> tuple[int, int]:
        stat = path.stat()
        return stat.st_size, stat.st_mtime_ns

    for kept, source in wanted.items():
        if kept.exists() and signature(kept) == signature(source):
            continue
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(kept.name + ".partial")
        shutil.copy2(source, partial)
        os.replace(partial, kept)  # a copy interrupted half-way is never taken for a checkpoint


def restore_sweep(copy_dir: Path, sweep_dir: Path) -> int:
    """Copy what ``sweep_dir`` lacks from ``copy_dir``: regular files and directories only, each
    checked before anything is copied (a link, or a name that leaves the target, is refused), and
    the sweep's recorded command checked as a resume checks it (`check_passed_on`): a restored
    sweep is resumed next, and a record that decides where it writes is refused before it lands."""
    config = saved_multirun(copy_dir)
    lines = [*recorded_overrides(config, "hydra"), *recorded_overrides(config, "task")]
    check_passed_on(lines, copy_dir / "multirun.yaml")
    check_copy_target(copy_dir, sweep_dir, "restore")
    refuse_links(copy_dir, "sweep restore")
    for path in copy_dir.rglob("*"):
        if not (path.is_file() or path.is_dir()):
            raise UserError(f"sweep restore: {path} is not a regular file; remove it")
    added = 0
    for path in sorted(copy_dir.rglob("*")):
        target = sweep_dir / path.relative_to(copy_dir)
        if path.is_dir() or target.exists() or target.is_symlink():
            continue
        if any(parent.is_symlink() for parent in target.parents if sweep_dir in parent.parents):
            raise UserError(
                f"sweep restore: {target.parent} in {sweep_dir} is a symbolic link; a restore "
                "writes only inside the sweep's directory"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
        added += 1
    print(f"restored {added} files of {copy_dir} into {sweep_dir}", flush=True)
    return 0
