"""Sentence and sentence-pair classification: ListOps, logical inference and SST.

Any encoder fits: the task embeds the tokens, runs the encoder and classifies its pooled vector
(``EncoderOutput.pooled``: the last real step of a recurrent model, the root of a tree model).
For pairs (``num_sentences=2``) both sentences go through the encoder in one call and the
classifier reads ``[u; v; u * v; |u - v|]`` (ON-LSTM Sec. 5.4, Ordered Memory Sec. 4.1); the MLP is
``Dropout -> Linear(F, H) -> ELU -> Dropout -> Linear(H, C)`` with ``mlp_layers`` hidden layers
(Ordered Memory: one hidden layer for logic, none for ListOps).

The encoder reads the view of the batch it declares (`treernn.data.batch`): gold-tree
encoders the trees' leaves with a `treernn.encoders.tree_batch.TreeBatch`, sequence
encoders the token view (with brackets for logic). Evaluation steps return the
`treernn.data.batch.EncodedBatch` for callbacks that read the encoder's output (induced
trees). Metrics: ``{stage}/loss``, ``{stage}/acc``, and at test
time accuracy per evaluation group and length bucket (``test/acc``, ``test/acc/ops7``,
``test/sysgen_A/acc``, ...) from one `GroupedAccuracy` that reduces across processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from treernn.data.batch import EncodedBatch
from treernn.data.classification import ClassificationBatch
from treernn.data.vocab import Vocabulary
from treernn.encoders.base import Encoder, check_dropout
from treernn.errors import ConfigValueError
from treernn.tasks.base import Task, build_encoder

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


class GroupedAccuracy(Metric):
    """Correct / total counts per (evaluation group, length bucket), summed across processes."""

    full_state_update = False

    def __init__(self, num_groups: int, num_buckets: int) -> None:
        super().__init__()
        shape = (num_groups, num_buckets)
        self.add_state("correct", torch.zeros(shape, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(shape, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor, groups: Tensor, buckets: Tensor) -> None:
        flat = groups * self.total.size(1) + buckets  # (B,)
        size = self.total.numel()
        self.total += torch.bincount(flat, minlength=size).view_as(self.total)
        hits = torch.bincount(flat, weights=(preds == target).double(), minlength=size)
        self.correct += hits.round().long().view_as(self.correct)

    def compute(self) -> tuple[Tensor, Tensor]:
        """(correct, total), each (groups, buckets)."""
        return self.correct, self.total


class ClassificationTask(Task):
    """Embedding -> encoder -> (pair features) -> MLP -> cross-entropy.

    Args (data-dependent ones come from ``DataModule.task_kwargs()``):
        encoder: a partial encoder, completed here with ``input_size=embedding_size``.
        num_sentences: 1 (single sentence) or 2 (pair, ``[u; v; u*v; |u-v|]``).
        embedding_init_range: embeddings drawn from U(-r, r) (Ordered Memory: 0.1); None keeps
            torch's N(0, 1).
        input_dropout: dropout on the embeddings (Ordered Memory "dropouti").
        output_dropout: dropout before each MLP layer (Ordered Memory "dropouto").
        mlp_layers / mlp_hidden_size: hidden layers of the classifier and their width
            (default: the encoder's output size).
        optimizer / scheduler: partials; a ReduceLROnPlateau scheduler steps on ``monitor``.
    """

    def __init__(
        self,
        encoder: Callable[..., Encoder],
        vocab_size: int,
        num_classes: int,
        pad_index: int = 0,
        num_sentences: int = 1,
        vocab: Vocabulary | None = None,
        label_names: Sequence[str] | None = None,
        bucket_names: Sequence[str] | None = None,
        group_names: Sequence[str] | None = None,
        embedding_size: int = 128,
        embedding_init_range: float | None = 0.1,
        input_dropout: float = 0.0,
        output_dropout: float = 0.0,
        mlp_layers: int = 1,
        mlp_hidden_size: int | None = None,
        activation: Literal["elu", "relu", "tanh"] = "elu",
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        monitor: str = "val/acc",
        pretrained_embeddings: Tensor | None = None,
        freeze_embeddings: bool = True,
    ) -> None:
        super().__init__(
            optimizer,
            scheduler,
            monitor,
            default_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
        )
        if num_sentences not in (1, 2):
            raise ConfigValueError(f"num_sentences={num_sentences}: use 1 (sentence) or 2 (pair)")
        check_dropout("input_dropout", input_dropout)
        check_dropout("output_dropout", output_dropout)
        if activation not in ACTIVATIONS:
            raise ConfigValueError(f"activation={activation!r}: use one of {sorted(ACTIVATIONS)}")
        if mlp_layers < 0:
            raise ConfigValueError(f"mlp_layers={mlp_layers}: use 0 or more hidden layers")
        # names arrive as omegaconf lists through hydra; checkpoints keep plain values only
        self.save_hyperparameters(
            ignore=[
                "encoder",
                "vocab",
                "optimizer",
                "scheduler",
                "label_names",
                "bucket_names",
                "group_names",
                "pretrained_embeddings",
            ]
        )
        self.vocab = vocab
        self.num_sentences = num_sentences
        self.label_names = list(label_names or range(num_classes))
        self.bucket_names = list(bucket_names or ["all"])
        self.group_names = list(group_names or ["test"])

        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_index)
        if embedding_init_range is not None:
            nn.init.uniform_(self.embedding.weight, -embedding_init_range, embedding_init_range)
        if pretrained_embeddings is not None:
            # e.g. GloVe rows in vocabulary order (Ordered Memory's SST setting: frozen)
            if tuple(pretrained_embeddings.shape) != tuple(self.embedding.weight.shape):
                raise ConfigValueError(
                    f"pretrained embeddings have shape {tuple(pretrained_embeddings.shape)}, the "
                    f"embedding table {tuple(self.embedding.weight.shape)}: set "
                    "task.module.embedding_size to the vectors' dimension"
                )
            with torch.no_grad():
                self.embedding.weight.copy_(pretrained_embeddings)
            self.embedding.weight.requires_grad_(not freeze_embeddings)
        self.input_dropout = nn.Dropout(input_dropout)
        self.encoder = build_encoder(encoder, input_size=embedding_size)
        hidden = self.encoder.output_size
        features = 4 * hidden if num_sentences == 2 else hidden
        width = mlp_hidden_size or hidden
        layers: list[nn.Module] = []
        for index in range(mlp_layers):
            layers += [
                nn.Dropout(output_dropout),
                nn.Linear(features if index == 0 else width, width),
                ACTIVATIONS[activation](),
            ]
        layers += [
            nn.Dropout(output_dropout),
            nn.Linear(width if mlp_layers else features, num_classes),
        ]
        self.classifier = nn.Sequential(*layers)

        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_accuracy = GroupedAccuracy(len(self.group_names), len(self.bucket_names))
        #: filled at the end of testing: {group: {"acc": .., "count": .., "buckets": {name: {..}}}}
        self.test_results: dict[str, Any] = {}

    def chance_levels(self) -> dict[str, float]:
        """A uniform guess over the C classes: ln C per example (training loss only: see
        `treernn.callbacks.divergence.DivergenceMonitor` for why not the validation's)."""
        return {"train/loss": math.log(self.hparams.num_classes)}

    # ----------------------------------------------------------------- model
    def encode(self, batch: ClassificationBatch) -> Tensor:
        """(S*B, H) one vector per sentence."""
        return self.encode_batch(batch).output.pooled

    def classify(self, pooled: Tensor) -> Tensor:
        """(S*B, H) sentence vectors -> (B, C) class logits."""
        if self.num_sentences == 2:
            u, v = pooled.chunk(2, dim=0)  # (B, H) each: first sentences, then second ones
            pooled = torch.cat([u, v, u * v, (u - v).abs()], dim=-1)  # (B, 4H)
        for layer in self.classifier:  # each product as the encoder asks (Encoder.head_linear)
            if isinstance(layer, nn.Linear):
                pooled = self.encoder.head_linear(layer, pooled, "classifier", "MLP")
            else:
                pooled = layer(pooled)
        return pooled

    def forward(self, batch: ClassificationBatch) -> Tensor:
        """(B, C) class logits."""
        return self.classify(self.encode(batch))

    # ----------------------------------------------------------------- steps
    def _step(self, batch: ClassificationBatch, stage: str) -> tuple[Tensor, Tensor, EncodedBatch]:
        encoded = self.encode_batch(batch)
        logits = self.classify(encoded.output.pooled)
        loss = F.cross_entropy(logits, batch.labels)
        self.log(f"{stage}/loss", loss, batch_size=len(batch), prog_bar=stage != "test")
        return loss, logits.argmax(-1), encoded

    def training_step(self, batch: ClassificationBatch, batch_idx: int) -> Tensor:
        loss, preds, _ = self._step(batch, "train")
        self.train_acc(preds, batch.labels)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: ClassificationBatch, batch_idx: int) -> EncodedBatch:
        _, preds, encoded = self._step(batch, "val")
        self.val_acc(preds, batch.labels)
        self.log("val/acc", self.val_acc, prog_bar=True, batch_size=len(batch))
        return encoded

    def test_step(self, batch: ClassificationBatch, batch_idx: int) -> EncodedBatch:
        _, preds, encoded = self._step(batch, "test")
        self.test_accuracy.update(preds, batch.labels, batch.groups, batch.buckets)
        return encoded

    def on_test_epoch_end(self) -> None:
        correct, total = self.test_accuracy.compute()
        self.test_results = self.summarise(correct.cpu(), total.cpu())
        for key, value in self.flat_metrics(self.test_results).items():
            self.log(key, value, sync_dist=False)
        self.test_accuracy.reset()

    def summarise(self, correct: Tensor, total: Tensor) -> dict[str, Any]:
        """Accuracy per group and bucket from (groups, buckets) counts."""
        # a (1, 1) metric state comes back from a distributed reduction as a scalar
        shape = (len(self.group_names), len(self.bucket_names))
        correct, total = correct.reshape(shape), total.reshape(shape)
        results: dict[str, Any] = {}
        for g, group in enumerate(self.group_names):
            buckets = {
                name: {"acc": int(correct[g, b]) / int(total[g, b]), "count": int(total[g, b])}
                for b, name in enumerate(self.bucket_names)
                if total[g, b] > 0
            }
            count = int(total[g].sum())
            accuracy = int(correct[g].sum()) / count if count else math.nan
            results[group] = {"acc": accuracy, "count": count, "buckets": buckets}
        return results

    def flat_metrics(self, results: dict[str, Any]) -> dict[str, float]:
        """``test/acc`` and ``test/acc/<bucket>`` for the first group, ``test/<group>/...`` else."""
        metrics: dict[str, float] = {}
        for index, (group, summary) in enumerate(results.items()):
            prefix = "test" if index == 0 else f"test/{group}"
            if summary["count"]:
                metrics[f"{prefix}/acc"] = summary["acc"]
            for bucket, cell in summary["buckets"].items():
                metrics[f"{prefix}/acc/{bucket}"] = cell["acc"]
        return metrics

    # ----------------------------------------------------------------- optimisation
    def optimizer_parameters(self) -> list[nn.Parameter]:
        # frozen pretrained embeddings stay out of the optimiser
        return [p for p in self.parameters() if p.requires_grad]
