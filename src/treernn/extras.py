"""What treernn needs beyond its core install, and the one line that says what to install.

``pip install treernn`` installs what an exported model needs to load and score (torch,
Lightning and torchmetrics, since the tasks are LightningModules, numpy, nltk, safetensors,
conllu, ninja for the C++ kernels). Training, reading a checkpoint, the loggers, the figures and
the statistics of the reports need the ``train`` extra (Hydra, OmegaConf, wandb, TensorBoard,
matplotlib, scipy); the Hub's methods need ``hub`` (`treernn.models.hub`). `require` imports a
module of an extra, or raises `MissingExtraError`: one line naming the package and the
``pip install`` that brings it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from treernn.errors import UserError

#: top-level module -> (the distribution that provides it, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "hydra": ("hydra-core", "train"),
    "omegaconf": ("omegaconf", "train"),
    "wandb": ("wandb", "train"),
    "tensorboard": ("tensorboard", "train"),
    "matplotlib": ("matplotlib", "train"),
    "scipy": ("scipy", "train"),
    "huggingface_hub": ("huggingface_hub", "hub"),
    "submitit": ("submitit", "cluster"),
    "optuna": ("optuna", "sweep"),
    "spacy": ("spacy", "parse"),
}


class MissingExtraError(UserError, ImportError):
    """A package of an optional part of treernn is not installed (the user's set-up: one line,
    no traceback)."""


def install_hint(extra: str) -> str:
    return f'pip install "treernn[{extra}]"'


def missing(module: str, what: str) -> MissingExtraError:
    """The error for ``what`` needing ``module``, which is not installed."""
    top = module.partition(".")[0]
    distribution, extra = EXTRAS[top]
    return MissingExtraError(
        f"{what} needs {distribution}, which is not installed: {install_hint(extra)}"
    )


def missing_extra(error: ModuleNotFoundError, what: str) -> MissingExtraError | None:
    """The one line for ``error`` where the module it misses belongs to an extra, else None (a
    module missing for another reason is a bug, or a broken install, and keeps its traceback)."""
    name = error.name or ""
    if name.partition(".")[0] not in EXTRAS:
        return None
    return missing(name, what)


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or `MissingExtraError` where its package is not installed. A module
    that is installed but fails to import for another reason keeps its traceback."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        top = module.partition(".")[0]
        if error.name is None or error.name.partition(".")[0] != top:
            raise  # the package is there and lacks something of its own: a broken install
        raise missing(module, what) from None
