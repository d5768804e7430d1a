"""Checkpoints are data: reading them safely, what they hold, rebuilding the task they trained, and
writing them atomically.

- Reading: every checkpoint is opened with ``torch.load(weights_only=True)``, which unpickles only
  tensors and plain containers; a file whose pickle names anything else (a function to call, a
  class to build) is refused with one line and nothing in it runs. Genuine treernn checkpoints hold
  nothing else (the vocabulary is stored as a plain dict).
- Rebuilding: the config stored in a checkpoint is instantiated only when every ``_target_`` in it
  is a class of treernn, of ``torch.optim`` or of ``lightning.pytorch`` (more module prefixes can
  be trusted with ``TREERNN_TRUSTED_MODULES=mypkg.models,otherpkg``: a model of your own package).
- What they hold besides Lightning's state: `RunInfo` adds a ``treernn`` block (the run's
  config, the task's data arguments, the wandb id, the random state) that the readers here use.
- Writing: `AtomicCheckpointIO` writes each checkpoint to a temporary file in its own
  directory, flushes it to disk and renames it into place, so a kill or a full disk leaves the
  previous file whole and no partial file. A full disk is one line (`StorageError`).
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback

from treernn.errors import CheckpointError
from treernn.extras import require
from treernn.files import CHECKPOINT_EXPANSION, RefusedFile, atomic_write, check_zip_expansion
from treernn.models.trust import TRUSTED_ENV, UntrustedClass, import_trusted, user_prefixes

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: module prefixes whose classes a stored config may name as ``_target_``
TRUSTED_PREFIXES = ("treernn.", "torch.optim.", "lightning.pytorch.")


# ----------------------------------------------------------------------------- reading
def read_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """A treernn checkpoint's contents, loaded as data only; one-line errors for a missing,
    damaged, hostile or foreign file."""
    path = Path(path)
    checkpoint = load_data(path, mmap=mmap)
    if not isinstance(checkpoint, dict) or "treernn" not in checkpoint:
        raise CheckpointError(
            f"{path} is not a treernn checkpoint (it has no run information); give a checkpoint "
            "written by python train.py"
        )
    return checkpoint


def load_data(path: str | Path, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain containers only."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        check_zip_expansion(path, CHECKPOINT_EXPANSION)
    except RefusedFile as refused:
        raise CheckpointError(f"checkpoint {path} refused: {refused.what}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        text = str(error)
        if "Weights only load failed" not in text:
            raise _damaged(path, error) from error
        found = re.search(r"GLOBAL ([\w.]+)", text)
        what = found.group(1) if found else "an object that is not a tensor or a plain container"
        raise CheckpointError(
            f"checkpoint {path} refused: its pickle names {what}, which is not data; treernn "
            "loads checkpoints as data only and runs nothing from them. Use a checkpoint "
            "written by python train.py"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise _damaged(path, error) from error


def _damaged(path: Path, error: BaseException) -> CheckpointError:
    if _neither_zip_nor_pickle(path):
        # a text file, a vocabulary, a config: torch's own words would speak of mmap and pickles
        return CheckpointError(
            f"{path} is not a torch checkpoint (torch.save writes a zip archive, and this file is "
            "not one): give a checkpoint (.ckpt), a run directory or an exported model's directory"
        )
    text = str(error).strip() or type(error).__name__
    first_line = text.splitlines()[0].split(". ")[0]
    return CheckpointError(
        f"checkpoint {path} cannot be read ({first_line}): it is truncated or not a torch "
        "checkpoint; use another checkpoint of the run (its checkpoints/*.ckpt)"
    )


def _neither_zip_nor_pickle(path: Path) -> bool:
    """Whether the file begins as no torch checkpoint does: a zip archive's ``PK`` (whole or
    truncated) or, from torch before 1.6, a pickle's protocol byte."""
    try:
        with path.open("rb") as file:
            start = file.read(2)
    except OSError:
        return False
    # an empty file is a checkpoint cut short as well as anything else
    return bool(start) and not (start.startswith(b"PK") or start.startswith(b"\x80"))


@dataclass
class CheckpointInfo:
    """What a checkpoint says about itself, read without its tensors (mmap)."""

    path: Path
    epoch: int
    global_step: int
    #: epochs whose training and validation were done when the checkpoint was written
    epochs_done: int
    config: dict[str, Any]
    wandb_id: str | None = None
    state_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: the best checkpoint by the run's monitor when this one was written (its ModelCheckpoint's
    #: ``best_model_path``, as the run named it), or ""
    best_model_path: str = ""

    @property
    def run_dir(self) -> Path | None:
        """The run directory that wrote this checkpoint (``<run>/checkpoints/x.ckpt``)."""
        parent = self.path.parent
        if parent.name == "checkpoints" and (parent.parent / ".hydra").is_dir():
            return parent.parent
        return None

    @property
    def task_name(self) -> str | None:
        return self.config.get("task", {}).get("name")

    @property
    def model_name(self) -> str | None:
        return self.config.get("model", {}).get("name")


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Open a treernn checkpoint without reading its tensors and check it is usable."""
    path = Path(path)
    checkpoint = read_checkpoint(path, mmap=True)
    state = checkpoint.get("state_dict", {})
    # epochs done: Lightning saves its loops' progress under "loops" and offers no public reader
    # of a checkpoint file (checked against Lightning 2.6.6); "epoch" alone cannot tell an epoch
    # that finished from one stopped midway
    progress = (
        checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {})
    )
    epoch = int(checkpoint.get("epoch", 0))
    return CheckpointInfo(
        path=path,
        epoch=epoch,
        epochs_done=int(progress.get("processed", epoch + 1)),
        global_step=int(checkpoint.get("global_step", 0)),
        config=checkpoint["treernn"].get("config", {}),
        wandb_id=checkpoint["treernn"].get("wandb_id"),
        state_shapes={key: tuple(value.shape) for key, value in state.items()},
        best_model_path=_best_model_path(checkpoint),
    )


def _best_model_path(checkpoint: dict[str, Any]) -> str:
    """The ``best_model_path`` kept in a checkpoint by its ModelCheckpoint (state keys start
    with the class name, "ModelCheckpoint{...}"; treernn's BestCheckpoint keeps that name)."""
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if str(key).startswith("ModelCheckpoint") and isinstance(state, dict):
            return str(state.get("best_model_path") or "")
    return ""


def check_task_and_model(info: CheckpointInfo, task: str, model: str) -> None:
    """A checkpoint given to another task or model: one line that says which it belongs to."""
    if (info.task_name, info.model_name) != (task, model):
        raise CheckpointError(
            f"checkpoint {info.path} was written by task={info.task_name} "
            f"model={info.model_name}, not task={task} model={model}: run with "
            f"task={info.task_name} model={info.model_name}, or give a checkpoint of this task "
            "and model"
        )


# ----------------------------------------------------------------------------- stored configs
def trusted_prefixes() -> tuple[str, ...]:
    return TRUSTED_PREFIXES + user_prefixes()


def _targets(node: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for name, value in node.items():
            where = f"{key}.{name}" if key else str(name)
            if name == "_target_":
                yield where, value
            else:
                yield from _targets(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _targets(value, f"{key}[{index}]")


def check_stored_targets(config: dict[str, Any], source: str) -> None:
    """Refuse a stored config that would build anything but a trusted class."""
    for where, target in _targets(config):
        trusted_class(target, f"its stored config names {where}", source)


def trusted_class(target: Any, what: str, source: str) -> type:
    """The class a checkpoint names by import path, refused (with one line saying why, nothing
    built) unless it is a class of a trusted package that exists in this version of the code."""
    prefixes = trusted_prefixes()
    try:
        return import_trusted(target, prefixes)
    except UntrustedClass as refused:
        reason = {
            "untrusted": f"{what}={target!r}, which is not a class of "
            f"{', '.join(p.rstrip('.') for p in prefixes)}; refused (nothing was built). If it "
            f"is a model of your own package, trust it with {TRUSTED_ENV}=<package>",
            "missing": f"{what}={target}, which does not exist in this version of the code; use "
            "a checkpoint written by this version",
            "not a class": f"{what}={target}, which is not a class; refused",
        }[refused.why]
        raise CheckpointError(f"{source}: {reason}") from None


# ----------------------------------------------------------------------------- rebuilding


def constructor_config(cfg: DictConfig) -> DictConfig:
    """A config node without its descriptive keys, ready for ``hydra.utils.instantiate``; a
    setting stored in an older spelling is given in today's (`current_spelling`)."""
    from omegaconf import OmegaConf

    from treernn.config_checks import DESCRIPTIVE_KEYS

    container = OmegaConf.to_container(cfg, resolve=True)
    for key in DESCRIPTIVE_KEYS:
        container.pop(key, None)
    return OmegaConf.create(current_spelling(container))


#: Encoders whose reference/fast switch was spelled otherwise before 278ea5f: Ordered Memory's
#: ``fused`` flag (true or false) and the tree LSTMs' ``impl: batched``; today
#: ``impl: fast | reference``.
_FUSED_FLAG = ("treernn.encoders.ordered_memory.OrderedMemoryEncoder",)
_BATCHED_IMPL = (
    "treernn.encoders.td_treelstm.TopDownTreeLSTM",
    "treernn.encoders.td_treelstm.LdTreeLSTM",
)


def current_spelling(model: dict[str, Any]) -> dict[str, Any]:
    """A stored encoder config with the settings renamed since it was written in today's
    spelling, so that older checkpoints still load and test (the constructors and the command
    line take only today's)."""
    model = dict(model)
    target = model.get("_target_")
    if target in _FUSED_FLAG and "fused" in model:
        fused = model.pop("fused")
        model.setdefault("impl", "fast" if fused else "reference")  # an explicit impl wins
    if target in _BATCHED_IMPL and model.get("impl") == "batched":
        model["impl"] = "fast"
    return model


def build_task(cfg: DictConfig, task_kwargs: dict[str, Any]) -> Any:
    """The task module of a config: its encoder partial completed by the task."""
    instantiate = require("hydra.utils", "rebuilding a model from a checkpoint").instantiate
    encoder = instantiate(constructor_config(cfg.model))
    return instantiate(cfg.task.module, encoder=encoder, **task_kwargs)


def serialise_task_kwargs(task_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Task constructor arguments as plain data (a vocabulary as its state dict)."""
    from treernn.data.vocab import Vocabulary

    return {
        key: {"__vocabulary__": value.state_dict()} if isinstance(value, Vocabulary) else value
        for key, value in task_kwargs.items()
    }


def deserialise_task_kwargs(stored: dict[str, Any]) -> dict[str, Any]:
    from treernn.data.vocab import Vocabulary

    return {
        key: Vocabulary.from_state_dict(value["__vocabulary__"])
        if isinstance(value, dict) and "__vocabulary__" in value
        else value
        for key, value in stored.items()
    }


class RunInfo(Callback):
    """Puts what rebuilding the task needs (config, data kwargs, wandb id) in checkpoints."""

    def __init__(self, cfg: DictConfig, task_kwargs: dict[str, Any], wandb_id: str | None) -> None:
        from omegaconf import OmegaConf

        self.cfg = OmegaConf.to_container(cfg, resolve=True)
        self.task_kwargs = serialise_task_kwargs(task_kwargs)
        self.wandb_id = wandb_id
        self._restored_rng: torch.Tensor | None = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint["treernn"] = {
            "config": self.cfg,
            "task_kwargs": self.task_kwargs,
            "wandb_id": self.wandb_id,
            "rng": {"torch": torch.get_rng_state()},
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        rng = checkpoint.get("treernn", {}).get("rng")
        self._restored_rng = rng["torch"] if rng and trainer.state.fn == "fit" else None

    def on_train_start(self, trainer, pl_module) -> None:
        # restored here, not when the checkpoint is loaded: Lightning draws random numbers while
        # it sets up the loops in between, which the run being resumed did not
        if self._restored_rng is not None:
            torch.set_rng_state(self._restored_rng)
            self._restored_rng = None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer and reader, made atomic on the target filesystem and data-only.

    Lightning's own writer stages a file in the system's temporary directory and moves it; across
    filesystems that move is a copy, which a full disk leaves as a 0-byte checkpoint.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        # serialised in memory first: torch's zip writer turns a failed write into an opaque
        # RuntimeError, a plain file write says ENOSPC
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write(
            path,
            lambda handle: handle.write(buffer.getbuffer()),
            kept="the previous checkpoint is kept",
        )

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None):
        # data only, whatever the caller asks: a checkpoint is never trusted to run code
        return load_data(path)
