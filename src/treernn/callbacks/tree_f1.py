"""Induced-tree F1 against gold trees: the ON-LSTM parse F1 (Sec. 5.2, Table 2) and the same
score on the classification tasks (logical inference, ListOps).

A model with a tree signal (``EncoderOutput.tree_signal``: ON-LSTM's master-forget distances, one
tree per layer; Ordered Memory's attention, one tree per sentence, reported as ``layer1``) gets its
trees from `treernn.parsing.induce.trees_from_signal` and is scored with EVALB's corpus-level
unlabeled bracket F1 and the authors' sentence-averaged F1 (`treernn.parsing.metrics`), summed
across processes by `treernn.metrics.BracketF1`. Keys: ``{stage}/parse_f1/layer{k}``
(corpus) and ``{stage}/parse_f1_sentence/layer{k}`` (k from 1). An encoder without a tree signal
(LSTM, Transformer, a model given the gold trees) is skipped with one warning; one that declares a
``tree_signal_kind`` and returns no signal stops the run.

Where the gold trees come from (``gold``):

- ``"batch"`` (``conf/callbacks/tree_f1.yaml``; logic, ListOps): the gold trees of the evaluation
  batches. The callback reuses the evaluation pass: ``validation_step``/``test_step`` return the
  `treernn.data.batch.EncodedBatch` (what the encoder read and its output), which Lightning
  hands to ``on_{validation,test}_batch_end``, so the trees are those of the model that made the
  predictions (eval mode, fresh state, no extra tokens). On logic the sequence models read the
  brackets too; the batch says where the leaves sit among the tokens read, and
  ``bracket_distances`` picks which distance a leaf gets (``"drop"``: its own; ``"max"``: the
  largest since the previous leaf, see `treernn.parsing.induce.leaf_distances`). At test
  time only the first evaluation group is scored (the systematic-generalisation groups repeat its
  sentences), and the per-layer table is printed beside the trivial trees of the same sentences
  (left/right-branching, balanced, random) and written to ``<output_dir>/tree_f1.json`` (what
  ``python -m treernn report table`` reads, baselines included).
  From a checkpoint: ``python -m treernn report tree-f1 --ckpt PATH``.
- ``"wsj"`` (``conf/callbacks/parse_f1.yaml``; language-model training): every ``every_n_epochs``
  validation epochs, the sentences of a WSJ split run through the task
  (``task.sentence_tree_signals``: ``<eos> w_1 ... w_n <eos>``, eval mode, fresh state) and their
  trees are scored against the treebank's, logged as ``val/...``. Under DDP the sentences are
  sharded over the processes and the counts summed, so the number is the one a single process
  would compute. ``treebank="auto"`` uses the full WSJ when ``wsj_dir`` holds its trees, else the
  nltk sample below ``data_dir``; ``split="test"`` / ``"short"`` pick the WSJ-test / WSJ10 columns
  (or the sample's ``sample`` / ``sample10``). With a wandb logger a table of a few induced trees
  beside the gold ones is logged too. With ``"test"`` in ``stages`` the tested weights are scored
  after testing exactly as ``python -m treernn parse --ckpt`` scores a checkpoint: both columns of
  Table 2 (WSJ10 and WSJ test, or sample10 and sample), one row per layer beside the trivial
  trees, printed, logged as ``test/parse_f1/layer{k}`` (the test column) and
  ``test/parse_f1_short/layer{k}`` (the short one), and written to ``<run dir>/parse_eval.json``
  (what ``python -m treernn report table`` reads, baselines included).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn

from treernn.data.batch import EncodedBatch
from treernn.errors import ConfigValueError
from treernn.evaluation.tree_f1 import (
    bracket_scores,
    induce_batch_trees,
    scored_rows,
    update_bracket_f1,
)
from treernn.metrics import BracketF1
from treernn.parsing.baselines import BASELINES, baseline_trees
from treernn.parsing.induce import NoDistancesError, trees_from_sentence_signals
from treernn.parsing.scoreboard import (
    GoldSet,
    load_gold,
    model_name,
    model_trees,
    score_layers,
    to_json,
    to_text,
)
from treernn.parsing.trees import BRACKET_DISTANCES, BracketDistances, leaves, to_bracketed
from treernn.parsing.wsj import (
    GoldSentence,
    TreebankError,
    default_splits,
    load_split,
    resolve_treebank,
)
from treernn.reporting.tree_f1 import format_tree_f1

GoldSource = Literal["batch", "wsj"]
GOLD_SOURCES = ("batch", "wsj")


class TreeF1Callback(Callback):
    """Parse F1 per layer of the induced trees against gold trees (see the module docstring).

    Args:
        gold: ``"batch"`` (the evaluation batches' trees) or ``"wsj"`` (a WSJ split).
        stages (batch): where to score, ``val`` (every validation epoch) and/or ``test``.
        bracket_distances (batch): ``drop`` or ``max``.
        output_dir (batch): where ``tree_f1.json`` goes after testing (None: not written).
        treebank, wsj_dir, data_dir, split (wsj): which gold sentences
            (`treernn.parsing.wsj.resolve_treebank`, `treernn.parsing.wsj.load_split`).
        every_n_epochs (wsj): score every n-th validation epoch.
        batch_size (wsj): sentences per forward pass; max_sentences: the first n only. A run
            that evaluates a number of batches (``trainer.limit_val_batches=2``, as
            ``trainer=smoke`` does) scores at most that many batches of sentences too.
        num_examples (wsj): induced trees beside gold ones in a wandb table.
    """

    def __init__(
        self,
        gold: GoldSource = "batch",
        stages: Sequence[str] = ("val", "test"),
        bracket_distances: BracketDistances = "drop",
        output_dir: str | Path | None = None,
        treebank: str = "auto",
        wsj_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        split: str = "test",
        every_n_epochs: int = 1,
        batch_size: int = 64,
        max_sentences: int | None = None,
        num_examples: int = 5,
    ) -> None:
        if gold not in GOLD_SOURCES:
            raise ConfigValueError(f"gold={gold!r}: use one of {GOLD_SOURCES}")
        unknown = set(stages) - {"val", "test"}
        if unknown:
            raise ConfigValueError(f"stages={list(stages)}: use 'val' and/or 'test'")
        if bracket_distances not in BRACKET_DISTANCES:
            raise ConfigValueError(
                f"bracket_distances={bracket_distances!r}: use one of {BRACKET_DISTANCES}"
            )
        if every_n_epochs < 1:
            raise ConfigValueError(f"every_n_epochs={every_n_epochs} must be at least 1")
        self.gold = gold
        self.stages = tuple(stages)
        self.bracket_distances = bracket_distances
        self.output_dir = Path(output_dir) if output_dir else None
        self.treebank = treebank
        self.wsj_dir = wsj_dir
        self.data_dir = data_dir
        self.split = split
        self.every_n_epochs = every_n_epochs
        self.batch_size = batch_size
        self.max_sentences = max_sentences
        self.num_examples = num_examples
        self._sentences: list[GoldSentence] | None = None
        self._split_name: str | None = None
        self._disabled = False
        self._active = False  # scoring the current evaluation epoch (gold="batch")
        self._metrics: list[BracketF1] = []
        #: the trivial trees of the test sentences (gold="batch"), by baseline name
        self._baselines: dict[str, BracketF1] = {}
        self._baseline_sentences = 0  # test sentences scored so far
        #: the last scores per stage: {stage: {"layer1": {"corpus_f1": .., ...}, ...}}
        self.results: dict[str, dict[str, dict[str, float]]] = {}

    @property
    def state_key(self) -> str:
        # the WSJ and the batch callbacks may run side by side
        return self._generate_state_key(gold=self.gold)

    # ------------------------------------------------------------------ shared
    def _skip(self, reason: str) -> None:
        rank_zero_warn(f"TreeF1Callback is skipped ({self.gold} gold trees): {reason}.")
        self._disabled = True

    def _no_signal(self, pl_module: pl.LightningModule, reason: str) -> None:
        """Skip where the encoder has no tree signal; one that declares a kind
        (``tree_signal_kind``) and returned none is a bug in it, which stops the run: its trees
        were asked for, and a warning would let it finish without them."""
        encoder = getattr(pl_module, "encoder", None)
        declared = getattr(encoder, "tree_signal_kind", None)
        if declared is not None:
            raise RuntimeError(
                f"{type(encoder).__name__} declares tree_signal_kind={declared!r} but its forward "
                "returned no tree_signal: return one in its EncoderOutput, or declare "
                "tree_signal_kind = None"
            )
        self._skip(reason)

    def _log_scores(self, stage: str, pl_module: pl.LightningModule) -> None:
        scores = {
            f"layer{layer}": bracket_scores(metric)
            for layer, metric in enumerate(self._metrics, start=1)
        }
        for layer, values in enumerate(scores.values(), start=1):
            # already reduced and equal on every process; sync_dist keeps Lightning quiet.
            # Logged in percent, the unit of the papers' tables and of `python -m treernn parse`
            # (tree_f1.json keeps fractions).
            for key, name in (("parse_f1", "corpus_f1"), ("parse_f1_sentence", "sentence_f1")):
                percent = 100.0 * values[name]
                pl_module.log(f"{stage}/{key}/layer{layer}", percent, sync_dist=True)
        self.results[stage] = scores
        if self._baselines:
            self.results[f"{stage}_baselines"] = {
                name: bracket_scores(metric) for name, metric in self._baselines.items()
            }
        self._metrics = []
        self._baselines = {}

    # ------------------------------------------------------------------ gold trees of the batch
    def _start(self, stage: str, trainer: pl.Trainer) -> None:
        self._metrics = []
        self._baselines = {}
        self._baseline_sentences = 0
        self._active = (
            self.gold == "batch"
            and stage in self.stages
            and not trainer.sanity_checking
            and not self._disabled
        )

    def _update(
        self, pl_module: pl.LightningModule, outputs: Any, batch: Any, first_group_only: bool
    ) -> None:
        if not self._active or self._disabled:
            return
        if not isinstance(outputs, EncodedBatch):
            raise TypeError(
                f"TreeF1Callback(gold='batch') reads the evaluation pass: "
                f"{type(pl_module).__name__}'s validation_step/test_step must return the "
                f"EncodedBatch, not {type(outputs).__name__}"
            )
        signal = outputs.output.tree_signal
        if signal is None:
            self._no_signal(
                pl_module,
                f"{type(pl_module.encoder).__name__} induces no trees (no tree signal: neither "
                "syntactic distances nor Ordered Memory attention)",
            )
            return
        if not self._metrics:  # one tree per layer of the signal
            self._metrics = [BracketF1().to(pl_module.device) for _ in range(signal.num_layers)]
        rows = scored_rows(batch, first_group_only)
        if not rows:
            return
        trees, gold = induce_batch_trees(
            pl_module, batch, rows, self.bracket_distances, encoded=outputs
        )
        update_bracket_f1(self._metrics, trees, gold)
        if first_group_only:  # testing: the trivial trees of the same sentences
            if not self._baselines:
                self._baselines = {name: BracketF1().to(pl_module.device) for name in BASELINES}
            lengths = [len(leaves(tree)) for tree in gold]
            seed = self._baseline_sentences  # random trees: a different seed for each batch
            self._baseline_sentences += len(gold)
            baseline = [baseline_trees(name, lengths, seed) for name in self._baselines]
            update_bracket_f1(list(self._baselines.values()), baseline, gold)

    def _finish(self, stage: str, pl_module: pl.LightningModule) -> None:
        active, self._active = self._active, False
        if active and self._metrics:
            self._log_scores(stage, pl_module)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("val", trainer)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._update(pl_module, outputs, batch, first_group_only=False)

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("test", trainer)

    def on_test_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._update(pl_module, outputs, batch, first_group_only=True)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.gold == "wsj":
            if "test" in self.stages and trainer.is_global_zero and self._wsj_usable(pl_module):
                self._test_scoreboards(trainer, pl_module)
            return
        self._finish("test", pl_module)
        scores = self.results.get("test")
        if self.gold != "batch" or not scores or not trainer.is_global_zero:
            return
        baselines = self.results.get("test_baselines", {})
        title = "induced trees vs gold trees (test)"
        print("\n" + format_tree_f1({**scores, **baselines}, title), flush=True)
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            path = self.output_dir / "tree_f1.json"
            data = {
                "bracket_distances": self.bracket_distances,
                "test": scores,
                "baselines": baselines,
            }
            path.write_text(json.dumps(data, indent=2))

    # ------------------------------------------------------------------ WSJ gold trees
    def _test_scoreboards(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The tested weights on both columns of Table 2, as ``python -m treernn parse``."""
        kind = resolve_treebank(self.treebank, self.wsj_dir, self.data_dir)
        record = []
        limit = self._sentence_limit(trainer, "test")
        for column, split in zip(("short", "test"), default_splits(kind)):
            gold = load_gold(split, wsj_dir=self.wsj_dir, data_dir=self.data_dir)
            if limit is not None:
                gold = GoldSet(gold.name, gold.sentences[:limit], gold.skipped)
            try:
                trees, unknown = model_trees(pl_module, gold, self.batch_size)
            except NoDistancesError as error:
                self._no_signal(pl_module, str(error))
                return
            board = score_layers([trees], gold, model_name([pl_module]), "the tested weights")
            print("\n" + to_text(board), flush=True)
            suffix = "" if column == "test" else "_short"
            for layer, row in enumerate(board.rows[: len(trees)], start=1):
                pl_module.log(
                    f"test/parse_f1{suffix}/layer{layer}",
                    100 * row.mean("corpus_f1"),
                    rank_zero_only=True,
                )
                pl_module.log(
                    f"test/parse_f1_sentence{suffix}/layer{layer}",
                    100 * row.mean("sentence_f1"),
                    rank_zero_only=True,
                )
            record.append(to_json(board) | {"unknown_word_rate": [unknown]})
        path = Path(trainer.default_root_dir) / "parse_eval.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"tables": record}, indent=2))

    def _load(self) -> list[GoldSentence]:
        if self._sentences is None:
            kind = resolve_treebank(self.treebank, self.wsj_dir, self.data_dir)
            short, test = default_splits(kind)
            split = {"short": short, "test": test}.get(self.split, self.split)
            sentences = load_split(kind, split, wsj_dir=self.wsj_dir, data_dir=self.data_dir)
            if self.max_sentences is not None:
                sentences = sentences[: self.max_sentences]
            self._sentences, self._split_name = sentences, split
        return self._sentences

    def _sentence_limit(self, trainer: pl.Trainer, stage: str) -> int | None:
        """At most ``max_sentences``, and at most as many batches of sentences as the trainer
        evaluates where it evaluates a number of batches (an int ``limit_{stage}_batches``, e.g.
        ``trainer=smoke``: a smoke run scored all 3,914 sample sentences, 70 s of its 85)."""
        limits = [self.max_sentences]
        batches = trainer.limit_val_batches if stage == "val" else trainer.limit_test_batches
        if isinstance(batches, int) and not isinstance(batches, bool) and batches > 0:
            limits.append(batches * self.batch_size)
        given = [limit for limit in limits if limit is not None]
        return min(given) if given else None

    def _wsj_usable(self, pl_module: pl.LightningModule) -> bool:
        if self._disabled:
            return False
        vocab = getattr(pl_module, "vocab", None)
        reason = None
        if not hasattr(pl_module, "sentence_tree_signals"):
            reason = f"{type(pl_module).__name__} cannot read sentences (a language model can)"
        elif vocab is None or "<eos>" not in vocab:
            reason = "the task has no vocabulary with <eos>"
        else:
            try:
                self._load()
            except TreebankError as error:
                reason = str(error)
        if reason is not None:
            self._skip(reason)
            return False
        return True

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.gold == "batch":
            self._finish("val", pl_module)
            return
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        if "val" not in self.stages or not self._wsj_usable(pl_module):
            return
        shard = self._load()[: self._sentence_limit(trainer, "val")]
        shard = shard[trainer.global_rank :: trainer.world_size]
        vocab = pl_module.vocab
        try:
            signals = pl_module.sentence_tree_signals(
                [vocab.encode(sentence.words) for sentence in shard], self.batch_size
            )
        except NoDistancesError as error:
            self._no_signal(pl_module, str(error))
            return
        trees = trees_from_sentence_signals(signals)  # [layer][sentence]
        # a process with no sentence must still join every layer's reduction
        num_layers = len(trees) if trees else int(getattr(pl_module.encoder, "num_layers", 1))
        self._metrics = [BracketF1().to(pl_module.device) for _ in range(num_layers)]
        if trees:
            update_bracket_f1(self._metrics, trees, [sentence.tree for sentence in shard])
        self._log_scores("val", pl_module)
        if trainer.is_global_zero and trees:
            self._log_examples(trainer, shard, trees)

    def _log_examples(
        self, trainer: pl.Trainer, shard: list[GoldSentence], trees: list[list[Any]]
    ) -> None:
        wandb_loggers = [
            logger for logger in trainer.loggers if type(logger).__name__ == "WandbLogger"
        ]
        if not wandb_loggers or self.num_examples <= 0:
            return
        rows = []
        for index, sentence in enumerate(shard[: self.num_examples]):
            gold = to_bracketed(sentence.tree, sentence.words)
            for layer, layer_trees in enumerate(trees):
                induced = to_bracketed(layer_trees[index], sentence.words)
                rows.append([trainer.current_epoch, sentence.source, layer + 1, induced, gold])
        for logger in wandb_loggers:
            logger.log_table(
                key="val/parse_trees",
                columns=["epoch", "sentence", "layer", "induced", "gold"],
                data=rows,
            )
