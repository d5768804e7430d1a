"""What every task shares: the embed -> encode step and the optimiser set-up.

Each encoder declares which view of the data it reads (see `treernn.encoders.base.Encoder`);
the batch hands out that view's inputs (`treernn.data.batch.EncoderInputs`: tokens, mask,
extra keywords such as ``tree=``, and for language models the words to predict);
`Task.encode_batch` runs the encoder on them and returns an
`treernn.data.batch.EncodedBatch`. `Task.encoder_inputs` is the only place a task
looks at the encoder's view, so a task holds its loss, metrics and optimiser and nothing that
depends on which encoder it runs.

Optimiser: ``optimizer`` and ``scheduler`` are partials from the task config (a task passes its
own default optimiser). Every parameter group remembers the learning rate it was built with as
``base_lr``, so a task can rescale the rate per step (`Task.scale_learning_rate`, the
language model's seq_len / bptt). A ``ReduceLROnPlateau`` scheduler steps on ``monitor`` at the
end of each epoch in which a validation ran (patience counts such epochs): where the trainer
validates every N updates (``trainer.val_check_interval=N``, ``check_val_every_n_epoch=null``)
and N is longer than an epoch, an epoch that ends without a new validation does not step it
again on the old value, and an epoch before the first validation does not step it at all.

Divergence: `Task.chance_levels` names what a model that predicts the uniform distribution
over the task's outputs scores (ln V nats per word, ln C per example);
`treernn.callbacks.divergence.DivergenceMonitor` stops a run that is clearly worse.

Validation vs test: the task tells its encoder which kind of evaluation runs
(`treernn.encoders.base.Encoder.set_eval_stage`: ``"validation"`` for the validation loop,
``"test"`` after it and for the test loop); Ordered Memory, whose eval mode uses more memory slots
at test time than in validation, is the encoder that acts on it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from torchmetrics import Metric

from treernn.data.batch import EncodedBatch, EncoderInputs
from treernn.encoders.base import Encoder, EncoderOutput, EvalStage
from treernn.errors import ConfigValueError

OptimizerFactory = Callable[..., torch.optim.Optimizer]
EncoderFactory = Callable[..., Encoder]


def build_encoder(factory: EncoderFactory, **sizes: Any) -> Encoder:
    """The encoder of ``conf/model/<model>.yaml`` (a partial) completed with the sizes the task
    knows (``input_size``, ``output_size``). A key its constructor does not take (e.g.
    ``model.weight_drop`` given to a GRU), or one it needs and nobody set, is one line naming
    the key, before any of the constructor runs."""
    if isinstance(factory, functools.partial) and inspect.isclass(factory.func):
        check_encoder_keywords(factory.func, {**factory.keywords, **sizes})
    encoder = factory(**sizes)
    # a plug-in's slip, said here rather than as an AttributeError deep in the task
    name = type(encoder).__name__
    if not isinstance(encoder, Encoder):
        raise TypeError(
            f"{name} is not a treernn.encoders.base.Encoder: subclass it (docs/how-to/new-model.md)"
        )
    for size in ("input_size", "output_size"):
        if not isinstance(getattr(encoder, size, None), int):
            raise TypeError(f"{name} sets no {size} (an int) in its constructor, as encoders must")
    return encoder


def check_encoder_keywords(encoder_class: type, keywords: dict[str, Any]) -> None:
    """Raise `ConfigValueError` for a keyword ``encoder_class`` does not take, or for a
    required one that ``keywords`` lacks."""
    parameters = dict(inspect.signature(encoder_class.__init__).parameters)
    parameters.pop("self", None)
    named = {
        name: parameter
        for name, parameter in parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(set(keywords) - set(named))
    if unknown and not takes_any:
        key = unknown[0]
        raise ConfigValueError(
            f"model.{key}: {encoder_class.__name__} takes no keyword {key!r} (its keywords: "
            f"{', '.join(named)}); drop it from conf/model/<model>.yaml, the preset or the "
            f"command line (~model.{key} removes it)"
        )
    missing = [name for name, p in named.items() if p.default is p.empty and name not in keywords]
    if missing:
        key = missing[0]
        raise ConfigValueError(
            f"model.{key} is missing: {encoder_class.__name__} needs it; add `{key}: ...` to "
            "conf/model/<model>.yaml"
        )


class Task(pl.LightningModule):
    """Base class of the tasks: embed -> encode, and ``configure_optimizers``.

    Subclasses build ``embedding``, ``encoder`` (and ``input_dropout`` unless they override
    `embed`) and call ``super().__init__`` with their optimiser settings.
    """

    embedding: nn.Embedding
    encoder: Encoder
    input_dropout: nn.Module

    def __init__(
        self,
        optimizer: OptimizerFactory | None = None,
        scheduler: Callable[..., Any] | None = None,
        monitor: str | None = None,
        default_optimizer: OptimizerFactory | None = None,
    ) -> None:
        super().__init__()
        factory = optimizer or default_optimizer
        if factory is None:
            raise ConfigValueError("a task needs an optimizer partial (task.module.optimizer)")
        self.optimizer_factory = factory
        self.scheduler_factory = scheduler
        self.monitor = monitor
        # validations run (sanity checks aside), and how many the plateau scheduler has seen
        self._validations = 0
        self._plateau_validations = 0
        #: the monitored metric of the last validation, from a checkpoint (see on_train_start)
        self._restored_monitor_value: float | None = None

    # ----------------------------------------------------------------- embed -> encode
    def encoder_inputs(self, batch: Any) -> EncoderInputs:
        """The batch's inputs for the view this task's encoder reads."""
        return batch.encoder_inputs(self.encoder.input_view)

    def embed(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, E) encoder inputs (embedding, then the task's input dropout)."""
        return self.input_dropout(self.embedding(tokens))

    def run_encoder(self, inputs: EncoderInputs, state: Any = None) -> EncoderOutput:
        """Run the encoder on one view's inputs; ``state`` is passed on when given."""
        kwargs = dict(inputs.kwargs)
        if state is not None:
            kwargs["state"] = state
        return self.encoder(self.embed(inputs.tokens), inputs.mask, **kwargs)

    def encode_batch(self, batch: Any, state: Any = None) -> EncodedBatch:
        inputs = self.encoder_inputs(batch)
        return EncodedBatch(inputs, self.run_encoder(inputs, state))

    def product_precisions(self) -> list[list[str]]:
        """What each product ran in under bf16-mixed, the encoder's and the task's output
        layers' (`Encoder.product_precisions`): the step timer writes them with its times."""
        return self.encoder.product_precisions()

    # ----------------------------------------------------------------- divergence
    def chance_levels(self) -> dict[str, float]:
        """What a model predicting the uniform distribution over the task's outputs scores, by
        metric key: a loss in nats (``train/loss``: ln V for V words, ln C for C classes) or a
        perplexity (``val/ppl``: V). Every listed metric is one where higher is worse; a
        training run clearly above these levels has diverged (see
        `treernn.callbacks.divergence.DivergenceMonitor`). None listed by default."""
        return {}

    # ----------------------------------------------------------------- validation vs test
    # A plateau scheduler steps at the end of an epoch on the newest validation's metric. Lightning
    # keeps that metric (trainer.callback_metrics) out of checkpoints, and so skips the plateau
    # step at the end of the epoch a run resumed in (its fit loop is "restarting"): a run resumed
    # between a validation and the epoch's end would decay its learning rate a validation late.
    # The task keeps the metric in its checkpoint, puts it back, and takes that step itself.
    def on_train_start(self) -> None:
        value, self._restored_monitor_value = self._restored_monitor_value, None
        metrics = self.trainer.callback_metrics
        if value is not None and self.monitor is not None and self.monitor not in metrics:
            metrics[self.monitor] = torch.tensor(value)

    def on_train_epoch_end(self) -> None:
        loop = self.trainer.fit_loop
        batches = loop.epoch_loop.batch_progress
        epoch_ran_to_its_end = (
            batches.is_last_batch or batches.current.ready == self.trainer.num_training_batches
        )
        if loop.restarting and epoch_ran_to_its_end:  # the step Lightning skips (see above)
            loop.epoch_loop.update_lr_schedulers("epoch", update_plateau_schedulers=True)

    def _tell_encoders(self, stage: EvalStage) -> None:
        """Every `Encoder` inside the task hears which evaluation runs (a task built around
        a plain ``nn.Module`` has none to tell)."""
        for module in self.modules():
            if isinstance(module, Encoder):
                module.set_eval_stage(stage)

    def on_validation_start(self) -> None:
        self._tell_encoders("validation")

    def on_validation_epoch_end(self) -> None:
        # counted here, before the checkpoint callbacks' on_validation_end: a checkpoint taken
        # after a validation holds the count that includes it
        trainer = self._attached_trainer()  # None: the hooks called without a trainer
        if trainer is not None and not trainer.sanity_checking:
            self._validations += 1

    def on_validation_end(self) -> None:
        self._tell_encoders("test")

    def on_test_start(self) -> None:
        self._tell_encoders("test")

    # ----------------------------------------------------------------- optimisation
    def optimizer_parameters(self) -> Iterable[nn.Parameter]:
        """The parameters handed to the optimiser (all of them unless a task says otherwise)."""
        return self.parameters()

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.optimizer_parameters())
        for group in optimizer.param_groups:
            group.setdefault("base_lr", group["lr"])
        if self.scheduler_factory is None:
            return optimizer
        scheduler: dict[str, Any] = {
            "scheduler": self.scheduler_factory(optimizer),
            "interval": "epoch",
        }
        if self.monitor is not None:
            scheduler["monitor"] = self.monitor
            if self._validates_by_updates():
                # an epoch may end before the first validation: no metric yet, no step (not an
                # error); lr_scheduler_step skips the epochs without a new validation
                scheduler["strict"] = False
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def _validates_by_updates(self) -> bool:
        trainer = self._attached_trainer()
        return trainer is not None and trainer.check_val_every_n_epoch is None

    def _attached_trainer(self) -> pl.Trainer | None:
        """The trainer running this task, or None outside one (Lightning's public property
        raises there)."""
        try:
            return self.trainer
        except RuntimeError:
            return None

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if metric is not None:  # a plateau scheduler: one step per new validation
            if self._validations == self._plateau_validations:
                return
            self._plateau_validations = self._validations
        super().lr_scheduler_step(scheduler, metric)

    # ----------------------------------------------------------------- checkpoints
    def _train_metrics(self) -> dict[str, Metric]:
        return {
            name: module
            for name, module in self.named_children()
            if name.startswith("train_") and isinstance(module, Metric)
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # what a run resumed in the middle of an epoch needs to continue exactly: the scheduler's
        # count of validations, and the training metrics accumulated over the epoch so far
        trainer = self._attached_trainer()
        # at an epoch's end Lightning resets the epoch's metrics after this save: none to keep
        epoch_over = bool(trainer and trainer.is_last_batch)
        monitored = trainer.callback_metrics.get(self.monitor) if trainer and self.monitor else None
        checkpoint["task_progress"] = {
            "validations": self._validations,
            "plateau_validations": self._plateau_validations,
            "monitor_value": None if monitored is None else float(monitored),
            "train_metrics": {}
            if epoch_over
            else {
                name: {key: _copy_state(value) for key, value in metric.metric_state.items()}
                for name, metric in self._train_metrics().items()
            },
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        progress = checkpoint.get("task_progress")
        if not progress:
            return
        self._validations = progress["validations"]
        self._plateau_validations = progress["plateau_validations"]
        self._restored_monitor_value = progress.get("monitor_value")
        metrics = self._train_metrics()
        for name, states in progress["train_metrics"].items():
            if name in metrics:
                for key, value in states.items():
                    setattr(metrics[name], key, _copy_state(value))

    def scale_learning_rate(self, factor: float) -> None:
        """Set every group's learning rate to ``base_lr * factor`` for the coming step."""
        for group in self.optimizers().param_groups:
            group["lr"] = group["base_lr"] * factor


def _copy_state(value: Any) -> Any:
    if isinstance(value, list):
        return [item.detach().clone() for item in value]
    return value.detach().clone()
