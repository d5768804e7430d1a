"""Sentence and sentence-pair classification: ListOps, logical inference (and SST later).

Any encoder fits: the task embeds the tokens, runs the encoder and classifies its pooled vector
(``EncoderOutput.pooled``: the last real step of a recurrent model, the root of a tree model).
For pairs (``num_sentences=2``) both sentences go through the encoder in one call and the
classifier reads ``[u; v; u * v; |u - v|]`` (ON-LSTM Sec. 5.4, Ordered Memory Sec. 4.1); the MLP is
``Dropout -> Linear(F, H) -> ELU -> Dropout -> Linear(H, C)`` with ``mlp_layers`` hidden layers
(Ordered Memory: one hidden layer for logic, none for ListOps).

Gold-tree encoders (``encoder.needs_tree``) read the trees' leaves with a
:class:`~treernn.encoders.tree_batch.TreeBatch` built from the batch's trees; sequence encoders read
the token view (with brackets for logic). Metrics: ``{stage}/loss``, ``{stage}/acc``, and at test
time accuracy per evaluation group and length bucket (``test/acc``, ``test/acc/ops7``,
``test/sysgen_A/acc``, ...) from one :class:`GroupedAccuracy` that reduces across processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from treernn.data.classification import ClassificationBatch
from treernn.data.vocab import Vocabulary
from treernn.encoders.base import Encoder, EncoderOutput, check_dropout
from treernn.encoders.tree_batch import TreeBatch

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


class ClassificationTask(pl.LightningModule):
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
        activation: str = "elu",
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        monitor: str = "val/acc",
        pretrained_embeddings: Tensor | None = None,
        freeze_embeddings: bool = True,
    ) -> None:
        super().__init__()
        if num_sentences not in (1, 2):
            raise ValueError(f"num_sentences={num_sentences}: use 1 (sentence) or 2 (pair)")
        check_dropout("input_dropout", input_dropout)
        check_dropout("output_dropout", output_dropout)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: use one of {sorted(ACTIVATIONS)}")
        if mlp_layers < 0:
            raise ValueError(f"mlp_layers={mlp_layers}: use 0 or more hidden layers")
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
        self.monitor = monitor
        self.optimizer_factory = optimizer or (lambda params: torch.optim.Adam(params, lr=1e-3))
        self.scheduler_factory = scheduler

        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_index)
        if embedding_init_range is not None:
            nn.init.uniform_(self.embedding.weight, -embedding_init_range, embedding_init_range)
        if pretrained_embeddings is not None:
            # e.g. GloVe rows in vocabulary order (Ordered Memory's SST setting: frozen)
            if tuple(pretrained_embeddings.shape) != tuple(self.embedding.weight.shape):
                raise ValueError(
                    f"pretrained embeddings have shape {tuple(pretrained_embeddings.shape)}, the "
                    f"embedding table {tuple(self.embedding.weight.shape)}: set "
                    "task.module.embedding_size to the vectors' dimension"
                )
            with torch.no_grad():
                self.embedding.weight.copy_(pretrained_embeddings)
            self.embedding.weight.requires_grad_(not freeze_embeddings)
        self.input_dropout = nn.Dropout(input_dropout)
        self.encoder = encoder(input_size=embedding_size)
        self.needs_tree = bool(getattr(self.encoder, "needs_tree", False))
        #: set by callbacks that read the encoder's evaluation output (e.g. induced trees), so
        #: that they reuse the forward pass of ``validation_step``/``test_step``
        self.keep_eval_output = False
        self.kept_output: EncoderOutput | None = None
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

    # ----------------------------------------------------------------- model
    def encoder_output(self, batch: ClassificationBatch) -> EncoderOutput:
        """The encoder's full output on every sentence (S*B rows): pooled vectors and, for
        sequence models, per-token signals such as ON-LSTM's distances (L, S*B, T)."""
        if self.needs_tree:
            tokens, mask = batch.leaf_tokens, batch.leaf_mask
            tree = TreeBatch.from_trees(
                batch.trees, lengths=mask.sum(1).tolist(), max_length=tokens.size(1)
            )
            tree = tree.to(tokens.device)
            x = self.input_dropout(self.embedding(tokens))  # (S*B, L, E)
            return self.encoder(x, mask, tree=tree)
        x = self.input_dropout(self.embedding(batch.tokens))  # (S*B, T, E)
        return self.encoder(x, batch.mask)

    def encode(self, batch: ClassificationBatch) -> Tensor:
        """(S*B, H) one vector per sentence."""
        output = self.encoder_output(batch)
        if self.keep_eval_output and not self.training:
            self.kept_output = output
        return output.pooled

    def pop_kept_output(self) -> EncoderOutput | None:
        """The evaluation output kept by the last ``encode`` (see ``keep_eval_output``), once."""
        output, self.kept_output = self.kept_output, None
        return output

    def forward(self, batch: ClassificationBatch) -> Tensor:
        """(B, C) class logits."""
        pooled = self.encode(batch)  # (S*B, H)
        if self.num_sentences == 2:
            u, v = pooled.chunk(2, dim=0)  # (B, H) each: first sentences, then second ones
            pooled = torch.cat([u, v, u * v, (u - v).abs()], dim=-1)  # (B, 4H)
        return self.classifier(pooled)

    # ----------------------------------------------------------------- steps
    def _step(self, batch: ClassificationBatch, stage: str) -> tuple[Tensor, Tensor]:
        logits = self(batch)
        loss = F.cross_entropy(logits, batch.labels)
        self.log(f"{stage}/loss", loss, batch_size=len(batch), prog_bar=stage != "test")
        return loss, logits.argmax(-1)

    def training_step(self, batch: ClassificationBatch, batch_idx: int) -> Tensor:
        loss, preds = self._step(batch, "train")
        self.train_acc(preds, batch.labels)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: ClassificationBatch, batch_idx: int) -> None:
        _, preds = self._step(batch, "val")
        self.val_acc(preds, batch.labels)
        self.log("val/acc", self.val_acc, prog_bar=True, batch_size=len(batch))

    def test_step(self, batch: ClassificationBatch, batch_idx: int) -> None:
        _, preds = self._step(batch, "test")
        self.test_accuracy.update(preds, batch.labels, batch.groups, batch.buckets)

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
    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory([p for p in self.parameters() if p.requires_grad])
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.monitor, "interval": "epoch"},
        }
