"""The one loading ladder: every trained model treernn reads for use (`treernn.load`, each
``python -m treernn`` command, ``from_pretrained``) is read here, from whichever it is given:

1. a checkpoint file (``.ckpt``): its task rebuilt from the config stored in it
   (`treernn.checkpoints` reads it safely), with the kernels' choices its run recorded;
2. a run directory: the best checkpoint its ``last.ckpt`` records, else ``last.ckpt``
   (`checkpoint_of`), read as 1;
3. an export folder (``python -m treernn export``): read as data by `treernn.models.export`;
4. a Hub repository id (``owner/name``, ``from_pretrained`` only): its export files
   downloaded (`treernn.models.hub`), read as 3.

Each rung ends in the same result: a `treernn.models.model.Model` of the kind the run trained
(`treernn.models.kinds`), which carries what a command needs beside the task itself: the run's
stored config (``needs_config=True`` refuses an export, which keeps none), its run directory,
its kind and the checkpoint read. A caller that works with one kind passes ``kind``, and a model
of another kind is refused with one line before it is built.

This module finds the model class through the kinds table and imports none: the classes'
``from_pretrained`` reads through this ladder, so the import runs one way.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treernn.errors import CheckpointError, ConfigValueError
from treernn.models import export
from treernn.models.kinds import KINDS, Kind, kind_of_task, model_class, task_class

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from treernn.checkpoints import CheckpointInfo


def load(
    path: str | Path,
    device: str | None = None,
    *,
    kind: Kind | None = None,
    command: str = "treernn.load",
    hint: str | None = None,
    needs_config: bool = False,
) -> Any:
    """The trained model at ``path``, in eval mode, on ``device`` (default: CUDA when there is
    one, else the CPU).

    ``path``: a treernn checkpoint (``.ckpt``), a run directory (the best checkpoint its
    ``last.ckpt`` records, else ``last.ckpt``) or an exported model directory (``config.json``,
    ``model.safetensors``, ``vocab.txt``; nothing in it is run). ``kind``: when given, a model of
    another kind is refused with one line before anything is built, naming ``command`` and what
    it needs (``hint``; default: the kind's usual run). ``needs_config``: the caller needs the
    run's stored config (its data), so an export, which keeps none, is refused. Loading reads the
    model's files and never writes into its folder.
    """
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not str(path):
        raise CheckpointError(
            f"{command}({path!r}): give the path of a checkpoint, a run directory or an "
            "exported model, as a string or a pathlib.Path"
        )
    return read(Path(path), device, kind, command, hint, needs_config=needs_config)


def from_hub(
    model_id: str, device: str | None, kind: Kind | None, command: str, **download: Any
) -> Any:
    """The Hub rung: the export files of Hub repository ``model_id`` downloaded
    (``download``: `treernn.models.hub.download`'s options), then read as an export."""
    from treernn.models.hub import download as download_files

    folder = download_files(model_id, export.EXPORT_FILES, **download)
    # huggingface_hub's cache: snapshots/<revision>/<file> link to the repository's blobs
    return read(folder, device, kind, command, links_within=folder.parent.parent)


def read(
    source: Path,
    device: str | None,
    kind: Kind | None,
    command: str,
    hint: str | None = None,
    links_within: Path | None = None,
    needs_config: bool = False,
) -> Any:
    """The ladder itself (module docstring): the model at local path ``source``."""
    from treernn import kernels

    if not source.exists():
        raise CheckpointError(f"{source} does not exist: give a checkpoint, run or export path")
    device = _device(device)
    export_choices: dict[str, str] = {}
    if export.is_export(source):
        if needs_config:
            needed = hint or (KINDS[kind].hint if kind else "a run's checkpoint")
            raise CheckpointError(
                f"{command}: {source} is an exported model, which keeps no run config; "
                f"{command} needs {needed}"
            )
        exported = export.load_export(source, kind=kind, command=command, links_within=links_within)
        module, config, found_kind, meta = exported.module, None, exported.kind, exported.meta
        checkpoint, export_config = None, exported.config
        export_choices = exported.choices
        # the kernels' choices the run recorded, kept with the export; new ones go to the
        # user's cache, never into the export's folder
        context = partial(kernels.context.attach_export, exported.choices, exported.key)
    else:
        checkpoint, export_config = checkpoint_of(source), None
        module, config, found_kind = _from_checkpoint(checkpoint, kind, command, hint)
        meta = export.meta_from_config(config)
        folder = checkpoint.resolve().parent
        run = folder.parent if folder.name == "checkpoints" else folder
        context = partial(kernels.context.attach, run, write=False)
    module = module.to(device).eval()
    model = model_class(found_kind)(
        module, found_kind, meta, source, config, checkpoint, export_config
    )
    model.export_choices = export_choices
    model.kernel_context = context
    kernels.context.use(model, context)
    return model


def default_device() -> str:
    """The device a command reads its model on unless told: CUDA when there is one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device(device: str | None) -> Any:
    """The device asked for, checked before anything is built: one line for a device this
    torch cannot use (``cuda`` on a build without CUDA, a GPU index that does not exist)."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigValueError(f"device={device!r}: {error}; use 'cpu' or 'cuda'") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch was built without CUDA"
                if torch.version.cuda is None
                else ("no CUDA device is visible")
            )
            raise ConfigValueError(f"device={device!r}: {why}; use device='cpu'")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise ConfigValueError(
                f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA devices "
                f"(0 to {torch.cuda.device_count() - 1})"
            )
    elif found.type not in ("cpu", "meta") and found.type != "mps":
        raise ConfigValueError(f"device={device!r}: use 'cpu' or 'cuda'")
    return found


def checkpoint_of(path: Path) -> Path:
    """The checkpoint `load` reads for ``path``: the file itself, or a run directory's best
    checkpoint (as its ``last.ckpt`` records it) when that file exists, else its ``last.ckpt``."""
    if path.is_file():
        return path
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    last = folder / "last.ckpt"
    if last.is_file():
        from treernn.checkpoints import inspect_checkpoint

        best = inspect_checkpoint(last).best_model_path
        if best and Path(best).name and (folder / Path(best).name).is_file():
            return folder / Path(best).name
        return last
    found = sorted(folder.glob("*.ckpt"), key=lambda candidate: candidate.stat().st_mtime)
    if not found:
        raise CheckpointError(
            f"{path} holds no checkpoint (checkpoints/*.ckpt) and no exported model "
            "(config.json): give a run directory, a .ckpt file or an export"
        )
    return found[-1]


def _from_checkpoint(
    path: Path, kind: Kind | None, command: str, hint: str | None
) -> tuple[Any, Any, Kind]:
    """The task of a checkpoint, its stored config and its kind."""
    trained = load_trained(
        path,
        kind=task_class(kind) if kind else None,
        command=command,
        hint=hint or (KINDS[kind].hint if kind else ""),
    )
    found = kind_of_task(trained.task)
    if found is None:
        raise CheckpointError(
            f"checkpoint {path} holds a {type(trained.task).__name__}, which treernn.load does "
            "not know how to use"
        )
    if found == "language_model" and "<eos>" not in trained.task.vocab:
        raise CheckpointError(f"checkpoint {path}: the vocabulary has no <eos> token")
    return trained.task, trained.config, found


# ----------------------------------------------------------------------------- checkpoints
@dataclass
class Trained:
    """A trained task rebuilt from its checkpoint, with what commands need to know about it."""

    task: Any  # the LightningModule, in eval mode
    config: DictConfig  # the run's config as stored in the checkpoint
    info: CheckpointInfo


def load_trained(
    path: str | Path,
    *,
    kind: type | None = None,
    command: str = "this command",
    hint: str = "another kind of checkpoint",
    averaged: bool = True,
) -> Trained:
    """Rebuild the task of a treernn checkpoint, in eval mode (the averaged NT-ASGD weights if
    any). ``kind``: the task class the caller works with, checked before anything is built."""
    import torch

    from treernn.checkpoints import (
        build_task,
        check_stored_targets,
        deserialise_task_kwargs,
        inspect_checkpoint,
        read_checkpoint,
    )
    from treernn.extras import require

    path = Path(path)
    info = inspect_checkpoint(path)
    if kind is not None:
        require_task(info, kind, command, hint)
    check_stored_targets(info.config, f"checkpoint {path}")
    checkpoint = read_checkpoint(path)
    stored = checkpoint["treernn"]
    # a checkpoint's config is built with Hydra (the train extra); an export needs neither
    omegaconf = require("omegaconf", f"reading checkpoint {path}")
    require("hydra.utils", f"reading checkpoint {path}")
    cfg = omegaconf.OmegaConf.create(stored["config"])
    # subnormal floats as zero before the model's first operation (conf/config.yaml)
    torch.set_flush_denormal(bool(cfg.get("flush_denormal", True)))
    task = build_task(cfg, deserialise_task_kwargs(stored["task_kwargs"]))
    state = checkpoint.get("averaged_state_dict") if averaged else None
    task.load_state_dict(state or checkpoint["state_dict"])
    task.on_load_checkpoint(checkpoint)
    return Trained(task=task.eval(), config=cfg, info=info)


def require_task(info: CheckpointInfo, kind: type, command: str, hint: str) -> None:
    """A command given a checkpoint of a task it cannot use: one line naming what it needs.
    ``kind``: the task class the command works with (a subclass is fine)."""
    from treernn.checkpoints import trusted_prefixes
    from treernn.models.trust import UntrustedClass, import_trusted

    target = info.config.get("task", {}).get("module", {}).get("_target_", "")
    name = str(target).rpartition(".")[2]
    try:
        found = import_trusted(target, trusted_prefixes())
    except UntrustedClass:
        found = None
    if not (inspect.isclass(found) and issubclass(found, kind)):
        raise CheckpointError(
            f"{command}: checkpoint {info.path} is a task={info.task_name} "
            f"model={info.model_name} run ({name or 'unknown task'}); {command} needs {hint}"
        )
