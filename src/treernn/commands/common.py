"""What several commands share: loading a language-model checkpoint, where a run's files go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from treernn.errors import CheckpointError


def load_language_model(ckpt: str | Path, device: str, need_distances: bool, command: str) -> Any:
    """The task of a treernn language-model checkpoint, in eval mode on ``device``."""
    from treernn.checkpoints import load_trained
    from treernn.tasks.language_model import LanguageModelTask

    path = Path(ckpt)
    task = load_trained(
        path,
        kind=LanguageModelTask,
        command=command,
        hint="a language model's checkpoint (task=ptb)",
    ).task
    if "<eos>" not in task.vocab:
        raise CheckpointError(f"checkpoint {path}: the vocabulary has no <eos> token")
    if need_distances and task.encoder.tree_signal_kind != "distances":
        raise CheckpointError(
            f"checkpoint {path}: its encoder {type(task.encoder).__name__} has no syntactic "
            "distances, so no tree can be induced; parse F1 needs a model such as ON-LSTM "
            "(model=onlstm)"
        )
    return task.to(device).eval()


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
