"""What a command needs from a checkpoint, from one loader: `load_run` rebuilds the task of a
treernn checkpoint and returns it with its stored config, its run directory and its kind (language
model, classifier, dependency language model), checked against the kind the command works with.

Also the few things every command that reads a run shares: where a run's files go
(`run_directory`), writing a result (`write_json`) and the default device. A command
that needs the data too builds it with `treernn.datamodules.prepared_datamodule`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from treernn.errors import CheckpointError

if TYPE_CHECKING:
    from omegaconf import DictConfig

TaskKind = Literal["language_model", "classifier", "dependency_lm"]

#: per kind: the task class (module, name) and what a command of that kind asks for by default
KINDS: dict[str, tuple[str, str, str]] = {
    "language_model": (
        "treernn.tasks.language_model",
        "LanguageModelTask",
        "a language model's checkpoint (task=ptb)",
    ),
    "classifier": (
        "treernn.tasks.classification",
        "ClassificationTask",
        "a classification run's checkpoint (task=logic or task=listops)",
    ),
    "dependency_lm": (
        "treernn.tasks.dependency_lm",
        "DependencyLanguageModel",
        "a dependency language model's checkpoint (task=dependency_lm)",
    ),
}


@dataclass
class LoadedRun:
    """A trained task rebuilt from its checkpoint, with what commands need to know about it."""

    task: Any  # the LightningModule, in eval mode
    config: DictConfig  # the run's config as stored in the checkpoint
    run_dir: Path  # outputs/.../<run>
    kind: TaskKind
    checkpoint: Path


def task_class(kind: TaskKind) -> type:
    import importlib

    module, name, _ = KINDS[kind]
    return getattr(importlib.import_module(module), name)


def load_run(
    ckpt: str | Path,
    kind: TaskKind,
    command: str,
    hint: str | None = None,
    device: str | None = None,
    need_distances: bool = False,
) -> LoadedRun:
    """The run of a treernn checkpoint whose task is of ``kind`` (else one line naming what
    ``command`` needs: ``hint``), in eval mode, on ``device`` when given. A language model must
    have ``<eos>`` in its vocabulary, and syntactic distances when ``need_distances``."""
    from treernn.checkpoints import load_trained

    path = Path(ckpt)
    hint = hint or KINDS[kind][2]
    trained = load_trained(path, kind=task_class(kind), command=command, hint=hint)
    task = trained.task
    if kind == "language_model":
        if "<eos>" not in task.vocab:
            raise CheckpointError(f"checkpoint {path}: the vocabulary has no <eos> token")
        if need_distances and task.encoder.tree_signal_kind != "distances":
            raise CheckpointError(
                f"checkpoint {path}: its encoder {type(task.encoder).__name__} has no syntactic "
                "distances, so no tree can be induced; parse F1 needs a model such as ON-LSTM "
                "(model=onlstm)"
            )
    if device is not None:
        task = task.to(device)
    return LoadedRun(
        task=task.eval(),
        config=trained.config,
        run_dir=run_directory(path),
        kind=kind,
        checkpoint=path,
    )


def run_directory(ckpt: str | Path) -> Path:
    """``outputs/.../<run>/checkpoints/x.ckpt`` -> ``outputs/.../<run>``."""
    path = Path(ckpt).resolve()
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def write_json(data: Any, path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2))
    print(f"written: {target}")
    return target


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
