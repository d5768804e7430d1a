"""The kinds of trained model treernn reads, in one table: per kind, the task class it is built
from, the public class a loaded model of that kind is, what messages call it, what a command that
needs it asks for, and its Hugging Face Hub card type.

Everything that asks "which kind is this model?" reads this table: the loading ladder
(`treernn.models.load`), the export format (`treernn.models.export_format` checks an export's
``kind``; `treernn.models.export` checks its task class and writes its card). Classes are named by
import path and imported only when asked for, so the export format reads the table without torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

Kind = Literal["language_model", "classifier", "dependency_lm"]


@dataclass(frozen=True)
class ModelKind:
    """One kind of trained model (a row of `KINDS`)."""

    #: the task class (``treernn.tasks``) a model of this kind is built from, by import path
    task: str
    #: the public class a loaded model of this kind is (`treernn.models.model`), by import path
    model: str
    #: what messages call a model of this kind
    called: str
    #: what a command that needs this kind asks for by default
    hint: str
    #: the Hub's task type and the task's name, for the model card
    card: tuple[str, str]


#: the one table of model kinds
KINDS: dict[str, ModelKind] = {
    "language_model": ModelKind(
        task="treernn.tasks.language_model.LanguageModelTask",
        model="treernn.models.model.LanguageModel",
        called="a language model",
        hint="a language model's checkpoint (task=ptb)",
        card=("text-generation", "Language modelling"),
    ),
    "classifier": ModelKind(
        task="treernn.tasks.classification.ClassificationTask",
        model="treernn.models.model.Classifier",
        called="a classifier",
        hint="a classification run's checkpoint (task=logic or task=listops)",
        card=("text-classification", "Classification"),
    ),
    "dependency_lm": ModelKind(
        task="treernn.tasks.dependency_lm.DependencyLanguageModel",
        model="treernn.models.model.DependencyLanguageModel",
        called="a dependency language model",
        hint="a dependency language model's checkpoint (task=dependency_lm)",
        card=("text-generation", "Dependency language modelling"),
    ),
}


def _imported(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def task_class(kind: str) -> type:
    """The task class a model of ``kind`` is built from."""
    return _imported(KINDS[kind].task)


def model_class(kind: str) -> type:
    """The public class a loaded model of ``kind`` is."""
    return _imported(KINDS[kind].model)


def kind_of_task(task: object) -> str | None:
    """The kind of a built task (an instance of a kind's task class), None for none of them."""
    return next((name for name in KINDS if isinstance(task, task_class(name))), None)


def kind_of_model(cls: type) -> str | None:
    """The kind whose public class is exactly ``cls`` (None for the base class or another)."""
    path = f"{cls.__module__}.{cls.__qualname__}"
    return next((name for name, kind in KINDS.items() if kind.model == path), None)
