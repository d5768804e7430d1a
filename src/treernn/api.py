"""treernn's Python API: a trained model one line away.

    import treernn
    model = treernn.load("outputs/ptb/onlstm/<run>")       # a run directory, a .ckpt or an export
    model.surprisals(["The cat sat on the mat."])
    model.trees(["The cat sat on the mat."], layer=2)

`load` takes a checkpoint file, a run directory (its best checkpoint, else ``last.ckpt``)
or a directory written by ``python -m treernn export``, and returns a `Model` of the kind the
run trained: `LanguageModel`, `Classifier` or `DependencyLanguageModel`. A method the model's kind
lacks raises `UnsupportedMethodError`. Every model has ``save_pretrained``, ``from_pretrained``
and ``push_to_hub`` (the Hugging Face Hub).

This module is the public face only: the loading ladder is `treernn.models.load`, the model
classes and their methods `treernn.models.model`, the kinds of model `treernn.models.kinds`.
"""

from __future__ import annotations

from treernn.models.load import load
from treernn.models.model import (
    Classifier,
    DependencyLanguageModel,
    Generation,
    LanguageModel,
    Model,
    Prediction,
    SentenceTrees,
    TokenScore,
    TokenSurprisal,
    UnsupportedMethodError,
)

__all__ = [
    "load",
    "Model",
    "LanguageModel",
    "Classifier",
    "DependencyLanguageModel",
    "UnsupportedMethodError",
    "TokenSurprisal",
    "TokenScore",
    "SentenceTrees",
    "Generation",
    "Prediction",
]
