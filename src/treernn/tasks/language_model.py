"""Word-level language modelling, the AWD-LSTM recipe (Merity et al. 2018) as ON-LSTM runs it.

Embedding -> embedding dropout (whole words) -> locked dropout -> encoder -> locked dropout -> tied
decoder. Loss = cross-entropy + activation regularisation (AR) + temporal activation regularisation
(TAR). The hidden state is carried across BPTT segments and detached; the learning rate of each step
is scaled by seq_len / bptt. NT-ASGD lives in `treernn.callbacks.ntasgd`.

`LanguageModelTask.sentence_tree_signals` reads whole sentences the way unsupervised parsing
does (ON-LSTM Sec. 5.2), for the tree-F1 callback and the evaluation commands.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn.checkpoints import trusted_class
from treernn.data.batch import EncoderInputs
from treernn.data.ptb import TokenStreamBatch
from treernn.data.vocab import Vocabulary
from treernn.encoders.base import Encoder, EncoderOutput, LockedDropout, TreeSignal, check_dropout
from treernn.errors import CheckpointError, DivergedError
from treernn.metrics import Perplexity
from treernn.parsing.induce import sentence_signals
from treernn.tasks.base import Task, build_encoder


class NonFiniteLossError(DivergedError):
    """Training produced a NaN or infinite loss."""


def embedded_dropout(embedding: nn.Embedding, words: Tensor, p: float, training: bool) -> Tensor:
    """Drop whole rows of the embedding matrix: a word is dropped everywhere in the batch."""
    weight = embedding.weight
    if training and p > 0:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(words, weight, embedding.padding_idx)


def _state_parts(state: Any) -> list[Any]:
    """The items of a carried state: a list or tuple, or the fields of a dataclass (e.g.
    Ordered Memory's ``OrderedMemoryState``)."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [getattr(state, field.name) for field in dataclasses.fields(state)]
    return list(state) if isinstance(state, (list, tuple)) else []


def detach_state(state: Any) -> Any:
    """The carried state (tensors, lists or tuples of them, or a dataclass of them) detached
    from the graph of the segment that produced it."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        fields = dataclasses.fields(state)
        return dataclasses.replace(
            state, **{field.name: detach_state(getattr(state, field.name)) for field in fields}
        )
    return type(state)(detach_state(s) for s in state)


def portable_state(state: Any) -> Any:
    """A carried state as tensors in lists, tuples and dicts only, so that a checkpoint holding it
    loads with ``torch.load(weights_only=True)`` (as Lightning loads the checkpoint it tests): a
    dataclass state (Ordered Memory's) becomes its class's import path and its fields."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        kind = type(state)
        fields = {f.name: portable_state(getattr(state, f.name)) for f in dataclasses.fields(state)}
        return {"dataclass": f"{kind.__module__}:{kind.__qualname__}", "fields": fields}
    if isinstance(state, (list, tuple)):
        return type(state)(portable_state(s) for s in state)
    return state


def restored_state(state: Any) -> Any:
    """The inverse of `portable_state`."""
    if isinstance(state, dict) and "dataclass" in state:
        module, _, name = str(state["dataclass"]).partition(":")
        what = "its carried state names the dataclass"
        kind = trusted_class(f"{module}.{name}", what, "checkpoint")
        if not dataclasses.is_dataclass(kind):
            raise CheckpointError(f"checkpoint: {what} {kind.__name__}, which is not one; refused")
        return kind(**{key: restored_state(value) for key, value in state["fields"].items()})
    if isinstance(state, (list, tuple)):
        return type(state)(restored_state(s) for s in state)
    return state


def state_batch_size(state: Any) -> int | None:
    """Batch size of a (nested) carried state, None when there is no tensor in it."""
    if isinstance(state, Tensor):
        return state.size(0)
    for item in _state_parts(state):
        size = state_batch_size(item)
        if size is not None:
            return size
    return None


class LanguageModelTask(Task):
    def __init__(
        self,
        encoder: Callable[..., Encoder],
        vocab_size: int,
        vocab: Vocabulary | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        embedding_size: int = 400,
        tie_weights: bool = True,
        embedding_dropout: float = 0.1,
        input_dropout: float = 0.5,
        output_dropout: float = 0.45,
        ar_alpha: float = 2.0,
        tar_beta: float = 1.0,
        ar_on_dropped: bool = False,
        bptt: int = 70,
        rescale_lr: bool = True,
    ) -> None:
        super().__init__(
            optimizer, default_optimizer=lambda params: torch.optim.SGD(params, lr=30.0)
        )
        for name in ("embedding_dropout", "input_dropout", "output_dropout"):
            check_dropout(name, locals()[name])
        self.save_hyperparameters(ignore=["encoder", "vocab", "optimizer"])
        self.vocab = vocab
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.encoder = build_encoder(
            encoder, input_size=embedding_size, output_size=embedding_size if tie_weights else None
        )
        self.decoder = nn.Linear(self.encoder.output_size, vocab_size)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            self.decoder.weight = self.embedding.weight
        self.lockdrop = LockedDropout()
        self.train_ppl, self.val_ppl, self.test_ppl = Perplexity(), Perplexity(), Perplexity()
        self._state: Any = None  # carried hidden state of the current stage
        self._epoch_tokens, self._train_seconds, self._batch_start = 0, 0.0, 0.0

    def chance_levels(self) -> dict[str, float]:
        """A uniform guess over the V words: ln V per word (``train/loss`` is the cross-entropy
        alone, without AR/TAR) and a perplexity of V."""
        words = self.decoder.out_features
        return {"train/loss": math.log(words), "val/ppl": float(words)}

    # ----------------------------------------------------------------- model
    def embed(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, E): embedding dropout (whole words), then locked dropout."""
        hp = self.hparams
        emb = embedded_dropout(self.embedding, tokens, hp.embedding_dropout, self.training)
        return self.lockdrop(emb, hp.input_dropout)  # (B, T, E)

    def decode(self, output: EncoderOutput) -> tuple[Tensor, Tensor]:
        """Logits (B, T, V) from the encoder's output, and the output after locked dropout."""
        dropped = self.lockdrop(output.hidden, self.hparams.output_dropout)
        logits = self.encoder.head_linear(self.decoder, dropped, "language model", "decoder")
        return logits, dropped

    def forward(self, inputs: Tensor, state: Any = None, mask: Tensor | None = None):
        """inputs (B, T) -> logits (B, T, V), encoder output, dropped output."""
        out = self.run_encoder(EncoderInputs("tokens", inputs, mask), state)
        logits, dropped = self.decode(out)
        return logits, out, dropped

    @torch.no_grad()
    def token_log_probs(
        self, inputs: Tensor, targets: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        """log p(targets[t] | inputs[:t+1]), fresh state, eval mode: (B, T), 0 at padding."""
        was_training = self.training
        self.eval()
        logits, _, _ = self(inputs, mask=mask)
        log_probs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        self.train(was_training)
        return log_probs if mask is None else log_probs * mask

    def sentence_tree_signals(
        self,
        sentences: Sequence[Sequence[int]],
        batch_size: int = 64,
        names: Sequence[str] | None = None,
    ) -> list[TreeSignal]:
        """The tree signal of each sentence of token ids (no ``<eos>``), read in eval mode with a
        fresh state as ``<eos> w_1 ... w_n <eos>`` (ON-LSTM Sec. 5.2): one one-row signal per
        sentence, see `treernn.parsing.induce.sentence_signals`. Raises
        `treernn.parsing.induce.NoDistancesError` for an encoder without a tree signal."""
        if self.vocab is None or "<eos>" not in self.vocab:
            raise ValueError("reading sentences needs a vocabulary with <eos> (task=ptb)")
        eos = self.vocab.eos_index
        return sentence_signals(self.embedding, self.encoder, sentences, eos, batch_size, names)

    def _step(self, batch: TokenStreamBatch) -> tuple[Tensor, EncoderOutput, Tensor]:
        inputs = batch.inputs  # (B, T)
        if state_batch_size(self._state) not in (None, inputs.size(0)):
            self._state = None
        encoded = self.encode_batch(batch, state=detach_state(self._state))
        out = encoded.output
        logits, dropped = self.decode(out)
        self._state = detach_state(out.state)
        targets = encoded.inputs.targets
        raw_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return raw_loss, out, dropped

    # ----------------------------------------------------------------- training
    def on_train_epoch_start(self) -> None:
        self._state = None
        self._epoch_tokens, self._train_seconds = 0, 0.0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # training time only (validation and callbacks excluded), for tokens per second
        self._train_seconds += time.perf_counter() - self._batch_start

    def training_step(self, batch: TokenStreamBatch, batch_idx: int) -> Tensor:
        hp = self.hparams
        raw_loss, out, dropped = self._step(batch)
        loss = raw_loss
        if hp.ar_alpha:
            loss = loss + hp.ar_alpha * (dropped if hp.ar_on_dropped else out.hidden).pow(2).mean()
        if hp.tar_beta:
            loss = loss + hp.tar_beta * (out.hidden[:, 1:] - out.hidden[:, :-1]).pow(2).mean()
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"non-finite training loss ({loss.item()}) at epoch {self.current_epoch}, "
                f"step {self.global_step}; lower the learning rate or the gradient clip. "
                "The last good checkpoint is untouched."
            )
        seq_len = batch.inputs.size(1)
        if hp.rescale_lr:
            self.scale_learning_rate(seq_len / hp.bptt)
        tokens = batch.inputs.numel()
        self._epoch_tokens += tokens
        self.train_ppl.update(raw_loss, tokens)
        self.log("train/loss", raw_loss, prog_bar=True)
        self.log("train/ppl", self.train_ppl, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if self._train_seconds > 0 and self._epoch_tokens:
            tokens_per_sec = self._epoch_tokens / self._train_seconds * self.trainer.world_size
            self.log("train/tokens_per_sec", tokens_per_sec)

    # ----------------------------------------------------------------- evaluation
    def on_validation_epoch_start(self) -> None:
        self._train_state_backup, self._state = self._state, None

    def validation_step(self, batch: TokenStreamBatch, batch_idx: int) -> None:
        raw_loss, _, _ = self._step(batch)
        self.val_ppl.update(raw_loss, batch.inputs.numel())
        self.log("val/ppl", self.val_ppl, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self._state = getattr(self, "_train_state_backup", None)

    def on_test_epoch_start(self) -> None:
        self._state = None

    def test_step(self, batch: TokenStreamBatch, batch_idx: int) -> None:
        raw_loss, _, _ = self._step(batch)
        self.test_ppl.update(raw_loss, batch.inputs.numel())
        self.log("test/ppl", self.test_ppl, on_step=False, on_epoch=True)

    # ----------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        # the carried hidden state, so a run resumed mid-epoch continues exactly
        checkpoint["carried_state"] = portable_state(self._state)
        if self.vocab is not None:
            checkpoint["vocab"] = self.vocab.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._state = restored_state(checkpoint.get("carried_state"))
        if "vocab" in checkpoint and self.vocab is None:
            self.vocab = Vocabulary.from_state_dict(checkpoint["vocab"])
