"""The trained models `treernn.load` returns (`treernn.models.load`), one class per kind of
model (`treernn.models.kinds`), and what their methods return; `treernn.api` is their public face.

    import treernn
    model = treernn.load("outputs/ptb/onlstm/<run>")       # a run directory, a .ckpt or an export
    model.surprisals(["The cat sat on the mat."])
    model.trees(["The cat sat on the mat."], layer=2)

`load` takes a checkpoint file, a run directory (its best checkpoint, else ``last.ckpt``)
or a directory written by ``python -m treernn export`` (`treernn.models.export`), and returns a
`Model` of the kind the run trained; no Hydra or Lightning knowledge is needed. Sentences go
in as raw text (tokenised the way the model's dataset was: `Model.words`) or as lists of
words taken as they are; results come out per sentence, batched inside. The methods by kind:

- a language model (task=ptb): ``log_probs``, ``surprisals``, ``perplexity``; minicons'
  scoring surface ``token_score`` (with each token's offsets in the input), ``sequence_score``
  and ``conditional_score`` (reductions, DataFrames, any iterable, progress bars); ``blimp``
  (BLiMP's three methods); ``trees`` when its encoder has syntactic distances (ON-LSTM);
- a classifier (logic, ListOps, SST): ``predict``; ``trees`` when its encoder induces trees
  (ON-LSTM distances, Ordered Memory attention);
- a dependency language model: ``score``, ``generate``.

A method the model's kind lacks raises `UnsupportedMethodError`, one line naming what the
model offers. Every ``python -m treernn`` command that reads a model goes through `load`
(the commands pass ``kind`` so that a checkpoint of another task is refused before it is built).

Every model also has ``save_pretrained``, ``from_pretrained`` and ``push_to_hub``
(``huggingface_hub``'s ``ModelHubMixin``, `treernn.models.hub`): they write, read and push the
directory ``python -m treernn export`` writes, and nothing else.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import CheckpointError, ConfigValueError, UserError
from treernn.models import export
from treernn.models.hub import HubMixin, from_the_hub, require
from treernn.models.kinds import KINDS, Kind, kind_of_model


def _own_kernels(method: Callable) -> Callable:
    """A method that computes with the model: first the model's own kernel context
    (`treernn.kernels.context.use`), so that a model loaded earlier in a process computes with
    the kernel choices it was loaded with, whatever model was loaded since; and the sizes it
    takes (``batch_size``, ``bptt``) checked first (a batch of 0 read no sentence at all)."""
    import inspect

    signature = inspect.signature(method)
    sizes = [name for name in _SIZES if name in signature.parameters]

    @functools.wraps(method)
    def computed(self: Model, *args: Any, **kwargs: Any) -> Any:
        if sizes:
            given = signature.bind_partial(self, *args, **kwargs).arguments
            for name in sizes:
                if name in given:
                    _check_size(name, given[name])
        if self.kernel_context is not None:
            from treernn import kernels

            kernels.context.use(self, self.kernel_context)
        return method(self, *args, **kwargs)

    return computed


#: the sizes a model's methods take: sentences a batch, words a stretch of backpropagation
_SIZES = {"batch_size": "sentences", "bptt": "words"}


def _check_size(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigValueError(
            f"{name}={value!r}: give a whole number of {_SIZES[name]}, 1 or more"
        )


class UnsupportedMethodError(UserError, AttributeError):
    """A method the model's kind does not have (``predict`` on a language model, ...)."""


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class TokenSurprisal:
    """One token of a sentence as the model read it: ``word`` (after tokenisation; ``<eos>`` for
    the end of the sentence), ``token`` (what the model saw: the word, or ``<unk>``), its
    surprisal ``-log2 p(token | what came before)`` in bits, and whether it was unknown."""

    word: str
    token: str
    surprisal: float
    unknown: bool


@dataclass(frozen=True)
class TokenScore:
    """One token of a scored sentence (`LanguageModel.token_score`): ``word`` (after
    tokenisation; ``<eos>`` for the end of the sentence), ``token`` (what the model saw: the word,
    or ``<unk>``), ``log_prob`` = ``ln p(token | what came before)`` in nats and ``surprisal`` =
    ``-log2 p`` in bits (the ``surprisals`` method's and LM-Zoo's unit), whether it was unknown,
    and ``start``/``end``: the span of the input string it was read from (``text[start:end]``;
    ``N`` the number's characters), None where no character of the input gave it (``<eos>``) or
    the input was a list of words."""

    word: str
    token: str
    log_prob: float
    surprisal: float
    unknown: bool
    start: int | None
    end: int | None


@dataclass(frozen=True)
class SentenceTrees:
    """The induced trees of one sentence: ``trees[i]`` is the bracketed tree of layer
    ``layers[i]`` (1 = the lowest) over ``words``; ``unknown`` are the words read as ``<unk>``;
    ``distances[i]`` the syntactic distance read at each word (ON-LSTM; None for attention);
    ``structures[i]`` the same tree as nested tuples of word positions (`treernn.parsing.trees`).

    The brackets carry no labels: ``((the cat) sat)``. ``nltk.Tree.fromstring`` would take each
    bracket's first word for a label; `nltk_trees` gives the trees as ``nltk.Tree`` objects."""

    sentence: str
    words: list[str]
    trees: list[str]
    layers: list[int]
    unknown: list[str] = field(default_factory=list)
    distances: list[list[float]] | None = None
    structures: list[Any] = field(default_factory=list, repr=False)

    def nltk_trees(self, label: str = "") -> list[Any]:
        """One ``nltk.Tree`` per layer in ``layers`` (score it with nltk's tools, draw it with
        `drawings` or ``.draw()``), unlabeled unless ``label`` is given for every bracket
        (``str`` of a labeled tree reads back with ``nltk.Tree.fromstring``)."""
        from treernn.parsing.trees import to_nltk

        return [to_nltk(structure, self.words, label) for structure in self.structures]

    def drawings(self) -> list[str]:
        """Each layer's tree drawn as text, every bracket labeled X, as ``python -m treernn trees
        --draw`` prints it. nltk's own ``pretty_print`` of an `nltk_trees` tree draws a word that
        follows a subtree before that subtree (a bug of nltk's printer); these keep the order."""
        from treernn.parsing.trees import drawing

        return [drawing(structure, self.words) for structure in self.structures]


@dataclass(frozen=True)
class Generation:
    """Sampled dependency trees (``(words, heads)``, heads 1-based, 0 for the root) and the
    held-out accuracy (%) of the four edge classifiers trained to grow them."""

    trees: list[tuple[list[str], list[int]]]
    classifier_accuracy: dict[str, float]


@dataclass(frozen=True)
class Prediction:
    """A classifier's answer: the most probable ``label`` and the probability of every label."""

    label: str
    probabilities: dict[str, float]


# ----------------------------------------------------------------------------- models
class Model(HubMixin):
    """A trained treernn model. ``module`` is the underlying ``torch.nn.Module`` (the task:
    embedding, encoder, head), ``meta`` what the model was trained on (task, model and dataset
    names, the data's reading settings), ``config`` the run's full config and ``checkpoint`` the
    file read when it was loaded from a checkpoint or run (both None for an export);
    ``export_config`` the ``config.json`` of an export it was loaded from (else None)."""

    #: the methods of this kind, in messages
    methods: tuple[str, ...] = ()

    def __init__(
        self,
        module: Any,
        kind: Kind,
        meta: dict[str, Any],
        source: Path,
        config: Any,
        checkpoint: Path | None = None,
        export_config: dict[str, Any] | None = None,
    ):
        self.module = module
        self.checkpoint = checkpoint
        self.kind = kind
        self.meta = meta
        self.source = source
        self.config = config
        self.export_config = export_config
        #: the kernels' choices an export's run recorded (kept when it is saved again)
        self.export_choices: dict[str, str] = {}
        #: attaches the kernels' context the model was loaded with (`treernn.models.load`)
        self.kernel_context: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return (
            f"<treernn {type(self).__name__}: task={self.meta.get('task')} "
            f"model={self.meta.get('model')} from {self.source}>"
        )

    @property
    def device(self):
        """The device the model's parameters are on."""
        return next(self.module.parameters()).device

    @property
    def run_dir(self) -> Path:
        """Where results about this model go: its run directory, or the export directory."""
        if self.checkpoint is None:
            return self.source
        folder = self.checkpoint.resolve().parent
        return folder.parent if folder.name == "checkpoints" else folder

    @property
    def vocab(self) -> Any:
        """The model's vocabulary (``Vocabulary``, or a list of words for a dependency LM)."""
        return self.module.vocab

    @property
    def encoder(self) -> Any:
        return self.module.encoder

    def to(self, device: str) -> Model:
        """Move the model to ``device``; returns it."""
        self.module = self.module.to(device)
        return self

    # ------------------------------------------------------------------ the Hub's methods
    # huggingface_hub's ModelHubMixin gives save_pretrained, from_pretrained and push_to_hub
    # (push_to_hub saves into a temporary directory and uploads it). save_pretrained is
    # treernn's own: the mixin's deletes the directory's config.json before its hook writes and
    # writes into the directory itself, so a failed save would damage the export it replaces;
    # treernn.models.export.save writes a new folder beside it and renames it into place. The
    # mixin's config.json and model card are never written: the export format decides both.
    # from_pretrained reads config.json itself and hands the values under the constructor's
    # parameter names (kind, meta, config) to _from_pretrained: they are not used, the export is
    # read and checked by treernn.models.export_format as treernn.load reads it.

    def save_pretrained(
        self,
        save_directory: str | Path,
        *,
        repo_id: str | None = None,
        push_to_hub: bool = False,
        config: Any = None,
        model_card_kwargs: Any = None,
        **push_to_hub_kwargs: Any,
    ) -> Any:
        """Write the model to ``save_directory`` as ``python -m treernn export`` does (weights as
        safetensors, ``config.json``, ``vocab.txt``, the model card; `treernn.models.export.save`),
        whole or not at all. The directory may be new, empty or an export, which is replaced.
        ``push_to_hub=True, repo_id=...``: push it too (``config`` and ``model_card_kwargs``, which
        the mixin's ``push_to_hub`` passes, are not used: the export format writes both).
        Needs ``pip install "treernn[hub]"``."""
        require("save_pretrained")
        export.save(self, save_directory)
        if push_to_hub:
            repo_id = repo_id or Path(save_directory).name
            return self.push_to_hub(repo_id=repo_id, **push_to_hub_kwargs)
        return None

    def _save_pretrained(self, save_directory: Path) -> None:
        export.save(self, save_directory)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **options: Any) -> Model:
        """The model saved in a directory (``save_pretrained``, ``python -m treernn export``) or a
        Hub repository (``owner/name``: its export files only are downloaded), loaded as
        `load` loads an export; ``device=`` as there. On a kind's class
        (``LanguageModel.from_pretrained``) a model of another kind is refused. Needs
        ``pip install "treernn[hub]"``."""
        require("from_pretrained")
        where = Path(pretrained_model_name_or_path)
        name = str(pretrained_model_name_or_path)
        if where.is_dir():
            # the mixin json-loads config.json before the hook runs: refuse what is not an
            # export, or an export of a newer format, in treernn.load's one line first
            export.check_links(where)
            export.read_config(where)
        elif where.exists() or where.is_absolute() or name.startswith((".", "~")):
            # the mixin would send a path that is not a directory to the Hub as a repository id
            raise CheckpointError(
                f"{name} is not a directory: from_pretrained reads an exported model's directory "
                "or a Hub repository id (owner/name); treernn.load reads checkpoints and runs"
            )
        if where.is_dir():
            return super().from_pretrained(pretrained_model_name_or_path, **options)
        with from_the_hub(name):
            return super().from_pretrained(pretrained_model_name_or_path, **options)

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None,
        cache_dir: str | Path | None,
        force_download: bool,
        local_files_only: bool,
        token: str | bool | None,
        device: str | None = None,
        proxies: dict | None = None,
        resume_download: bool | None = None,
        kind: Any = None,
        meta: Any = None,
        config: Any = None,
    ) -> Model:
        # proxies and resume_download: what huggingface_hub before 1.0 also passes; kind, meta
        # and config: config.json's values, which the mixin passes (see above) and load rereads
        from treernn.models.load import from_hub, read

        wanted = kind_of_model(cls)
        command = f"{cls.__name__}.from_pretrained"
        folder = Path(model_id)
        if folder.is_dir():
            return read(folder, device, wanted, command)
        older = {"proxies": proxies, "resume_download": resume_download}
        return from_hub(
            model_id,
            device,
            wanted,
            command,
            revision=revision,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
            **{name: value for name, value in older.items() if value is not None},
        )

    def _unsupported(self, method: str) -> UnsupportedMethodError:
        return UnsupportedMethodError(
            f"{method}: {self.source} is {KINDS[self.kind].called} (task={self.meta.get('task')} "
            f"model={self.meta.get('model')}), which has no {method}; it offers "
            f"{', '.join(self.methods) or 'no method'}"
        )

    def log_probs(self, sentences: Sequence[str | Sequence[str]], **options: Any) -> list[float]:
        """Language models: the natural-log probability of each sentence."""
        raise self._unsupported("log_probs")

    def surprisals(self, sentences, **options: Any) -> list[list[TokenSurprisal]]:
        """Language models: each token's surprisal in bits."""
        raise self._unsupported("surprisals")

    def perplexity(self, text: str | Sequence[str], **options: Any) -> float:
        """Language models: the perplexity of a text."""
        raise self._unsupported("perplexity")

    def trees(self, sentences, layer: int | None = None, **options: Any) -> list[SentenceTrees]:
        """Tree-inducing encoders (ON-LSTM, Ordered Memory): each sentence's induced trees."""
        raise self._unsupported("trees")

    def sequence_score(self, sentences, reduction: Any = "mean", **options: Any) -> Any:
        """Language models: each sentence's log-probability, reduced over its tokens."""
        raise self._unsupported("sequence_score")

    def conditional_score(self, prefixes, continuations, reduction: Any = "mean", **options: Any):
        """Language models: each continuation's log-probability given its prefix."""
        raise self._unsupported("conditional_score")

    def token_score(self, sentences, **options: Any) -> Any:
        """Language models: each token's log-probability, with its offsets in the input."""
        raise self._unsupported("token_score")

    def blimp(self, pairs, method: str = "full", **options: Any) -> Any:
        """Language models: BLiMP minimal pairs, by BLiMP's full-sentence or prefix methods."""
        raise self._unsupported("blimp")

    def predict(self, inputs, **options: Any) -> list[Prediction]:
        """Classifiers: the label of each input and the probabilities of every label."""
        raise self._unsupported("predict")

    def score(self, trees, **options: Any) -> list[float]:
        """Dependency language models: the log-probability of each tree's sentence."""
        raise self._unsupported("score")

    def generate(self, n: int, **options: Any) -> Generation:
        """Dependency language models: ``n`` sampled trees."""
        raise self._unsupported("generate")

    def words(self, sentence: str | Sequence[str]) -> list[str]:
        """A sentence as the model reads it: raw text tokenised the way the model's dataset was;
        a list of words is taken as it is."""
        if isinstance(sentence, str):
            return sentence.split()
        return _given_words(sentence)

    def _tree_signal_kind(self) -> str | None:
        return self.encoder.tree_signal_kind

    def _check_layer(self, layer: int | None, layers: int) -> list[int]:
        if layer is None:
            return list(range(1, layers + 1))
        if not 1 <= layer <= layers:
            raise ConfigValueError(f"layer={layer}: the model has layers 1 to {layers}")
        return [layer]


def _numbered_words(
    model: Model,
    sentences: Iterable[str | Sequence[str]],
    allow_empty: bool = False,
    tokenized: bool = False,
) -> list[list[str]]:
    """Each sentence's words (``tokenized``: a string's words between spaces, taken as they are);
    a sentence with none is one line naming it, unless ``allow_empty`` (a language model scores
    it as its closing ``<eos>`` alone)."""
    sentences = _sentence_list(sentences)
    words = [
        model.words(sentence, tokenized=True) if tokenized else model.words(sentence)
        for sentence in sentences
    ]
    for number, (sentence, sentence_words) in enumerate(zip(sentences, words), start=1):
        _check_words(model, f"sentence {number}", sentence, sentence_words, allow_empty)
    return words


def _given_words(sentence: Any) -> list[str]:
    """A sentence given as its words: any sequence of strings (a list, a tuple, ...)."""
    try:
        words = list(sentence)
    except TypeError:
        words = None
    if words is None or not all(isinstance(word, str) for word in words):
        raise ConfigValueError(
            f"{sentence!r} is not a sentence: give each sentence as a string, or as a list of "
            "its words (strings)"
        )
    return words


def _sentence_list(sentences: Iterable[Any], name: str = "sentences") -> list[Any]:
    _not_one_string(sentences, name)
    return list(sentences)


def _not_one_string(sentences: Any, name: str) -> None:
    if isinstance(sentences, str):
        raise ConfigValueError(
            f"{name}: give a list of sentences (one string is one sentence: [text])"
        )


def _check_words(
    model: Model, label: str, sentence: Any, words: Sequence[str], allow_empty: bool
) -> None:
    """One line where ``words`` (of ``sentence``, called ``label`` in the message) cannot be
    read: none at all (unless ``allow_empty``), or words the vocabulary lacks without an
    ``<unk>`` to read them as."""
    if not words and not allow_empty:
        raise ConfigValueError(f"{label} ({sentence!r}) has no words after dropping punctuation")
    vocab = model.vocab
    unknown = [word for word in words if word not in vocab]
    if unknown and "<unk>" not in vocab:
        raise ConfigValueError(
            f"{label} ({sentence!r}): {', '.join(map(repr, unknown))} not in the "
            "model's vocabulary, which has no <unk> to read unknown words as"
        )


def _shown(sentence: str | Sequence[str]) -> str:
    return sentence if isinstance(sentence, str) else " ".join(sentence)


#: how many sentences a streamed input is read ahead, in batches (sorted by length within)
_READ_AHEAD_BATCHES = 16
#: the reductions `LanguageModel.sequence_score` names
REDUCTIONS = ("sum", "mean")


def _reduced(values: list[float], reduction: Any, label: str, item: Any) -> float:
    """One score from a sequence's per-token log-probabilities (module `LanguageModel`)."""
    if not values:
        raise ConfigValueError(
            f"{label} ({_shown(item)!r}) has no token to score: its words are all punctuation "
            "and its <eos> is not counted (include_end=False)"
        )
    if reduction == "sum":
        return math.fsum(values)
    if reduction == "mean":
        return math.fsum(values) / len(values)
    if callable(reduction):
        import torch

        reduced = reduction(torch.tensor(values, dtype=torch.float64))
        return float(reduced)
    raise ConfigValueError(
        f"reduction={reduction!r}: use 'sum', 'mean' or a function of the tokens' "
        "log-probabilities (a 1-D tensor, as minicons passes)"
    )


def _dataframe(rows: list[dict[str, Any]], columns: Sequence[str], purpose: str) -> Any:
    """A pandas DataFrame of ``rows`` (pandas, an optional package, is imported only here)."""
    from treernn.progress import optional_module

    pandas = optional_module("pandas", purpose)
    return pandas.DataFrame(rows, columns=list(columns))


class LanguageModel(Model):
    """A word-level language model (task=ptb): PTB's words, each sentence read after ``<eos>``
    from a fresh state, as the ON-LSTM paper's syntactic evaluation and tree induction read it."""

    methods = (
        "log_probs",
        "surprisals",
        "perplexity",
        "token_score",
        "sequence_score",
        "conditional_score",
        "blimp",
        "syntaxgym",
        "trees (ON-LSTM)",
    )

    def words(self, sentence: str | Sequence[str], tokenized: bool = False) -> list[str]:
        """Raw text as the PTB language-modelling files write it (`treernn.data.raw_text`:
        Treebank tokenisation, lower case, numbers and ``%`` as ``N``, punctuation dropped; a
        line already in that form, such as one of ``ptb.test.txt``, keeps its words). With
        ``tokenized=True`` a string's words between spaces are taken as they are; a list of words
        always is."""
        from treernn.data.raw_text import ptb_words

        if isinstance(sentence, str):
            return sentence.split() if tokenized else ptb_words(sentence, self.vocab)
        return _given_words(sentence)

    def _tokens(self, sentence: str | Sequence[str], tokenized: bool = False) -> list[Any]:
        """`words` with where each came from: ``(word, start, end)``, ``text[start:end]`` the
        characters it was read from (None and None for a list of words)."""
        from treernn.data.raw_text import ptb_tokens, whitespace_tokens

        if not isinstance(sentence, str):
            return [(word, None, None) for word in _given_words(sentence)]
        found = whitespace_tokens(sentence) if tokenized else ptb_tokens(sentence, self.vocab)
        return [tuple(token) for token in found]

    @_own_kernels
    def log_probs(
        self,
        sentences: Iterable[str | Sequence[str]],
        include_end: bool = True,
        batch_size: int = 64,
        *,
        tokenized: bool = False,
    ) -> list[float]:
        """``log p(w_1 .. w_n <eos> | <eos>)`` of each sentence in nats (without the closing
        ``<eos>``'s term when not ``include_end``), each read alone from a fresh state. The same
        numbers ``python -m treernn syneval`` compares; ``sequence_score(..., reduction="sum")``
        gives them too (summed in float64: equal to float32's rounding). ``tokenized``: as
        `words` takes it."""
        from treernn.evaluation.syneval import sentence_log_probs

        words = _numbered_words(self, sentences, allow_empty=True, tokenized=tokenized)
        return sentence_log_probs(self.module, words, batch_size, include_end)

    @_own_kernels
    def surprisals(
        self,
        sentences: Iterable[str | Sequence[str]],
        batch_size: int = 64,
        *,
        tokenized: bool = False,
    ) -> list[list[TokenSurprisal]]:
        """Per sentence, every word and the closing ``<eos>`` with its surprisal in bits
        (``-log2 p``), each sentence read alone after ``<eos>`` from a fresh state; a word
        outside the vocabulary is read (and scored) as ``<unk>`` and marked ``unknown``. A sentence
        with no words (a line of punctuation, which PTB's normalisation drops) is its ``<eos>``
        alone. ``tokenized``: as `words` takes it."""
        from treernn.evaluation.surprisal import bits, word_log_probs

        words = _numbered_words(self, sentences, allow_empty=True, tokenized=tokenized)
        vocab = self.vocab
        results = []
        for sentence, values in zip(words, word_log_probs(self.module, words, batch_size)):
            tokens = [*sentence, "<eos>"]
            results.append(
                [
                    TokenSurprisal(
                        word=word,
                        token=word if word in vocab else "<unk>",
                        surprisal=bits(value),
                        unknown=word not in vocab,
                    )
                    for word, value in zip(tokens, values)
                ]
            )
        return results

    @_own_kernels
    def syntaxgym(
        self,
        suites: Any = (),
        batch_size: int = 64,
        name: str | None = None,
        progress: Any = None,
    ):
        """SyntaxGym test suites (Hu et al. 2020) scored as the ``syntaxgym`` package scores
        them (`treernn.evaluation.syntaxgym`): ``suites`` a suite (a
        `treernn.data.syntaxgym.Suite`, or the path of a suite's JSON file or of a folder of
        them) or a list of them; none: Hu et al.'s 34 suites, from ``$TREERNN_DATA_DIR/syntaxgym``
        or downloaded. Returns a `treernn.evaluation.syntaxgym.SyntaxGymResult`: per suite and
        item, the SG score, the circuits, the ``<unk>`` shares; ``name`` is the model's name in
        its CSV (default ``<model>_<corpus>_<seed>``); ``progress`` is called with a line per
        suite."""
        from treernn.data.syntaxgym import Suite, model_label
        from treernn.evaluation.lmzoo import model_name_parts
        from treernn.evaluation.syntaxgym import TaskScorer, evaluate_suites, read_suites

        given = [suites] if isinstance(suites, (str, Path, Suite)) else list(suites)
        chosen = [] if given else read_suites()
        for suite in given:
            chosen += [suite] if isinstance(suite, Suite) else read_suites([suite])
        scorer = TaskScorer(self.module, batch_size, self.words)
        label = name or model_label(*model_name_parts(self))
        return evaluate_suites(chosen, scorer, label, progress)

    @_own_kernels
    def perplexity(
        self,
        text: str | Iterable[str | Sequence[str]],
        bptt: int = 70,
        *,
        tokenized: bool = False,
        progress: bool | None = None,
    ) -> float:
        """Perplexity of a text read as PTB's test split is: its lines (a string is split into
        lines at ``\\n``; blank ones are skipped) as one stream, each line closed by ``<eos>``,
        the state carried along; the first word is not predicted. On PTB's test file this is the
        run's ``test/ppl`` at test batch size 1, whether the file is read as raw text (its lines
        keep their words) or with ``tokenized=True`` (each line's words between spaces, as the
        data reader splits them). ``progress``: a bar over the tokens (`treernn.progress`:
        ``None`` shows it in interactive use once the call runs two seconds)."""
        from treernn.evaluation.surprisal import stream_perplexity
        from treernn.files import text_lines
        from treernn.progress import progress_bar

        if isinstance(text, str):  # lines end at \n only, as the data's readers split them
            lines: Iterable[Any] = (line for line in text_lines(text) if line.strip())
        else:
            lines = text
        words = [
            line_words
            for line_words in _numbered_words(self, lines, allow_empty=True, tokenized=tokenized)
            if line_words
        ]
        tokens = sum(len(line) + 1 for line in words)
        if tokens < 2:
            raise ConfigValueError("perplexity: the text has no words")
        with progress_bar(progress, tokens - 1, "perplexity", unit="token") as bar:
            return stream_perplexity(self.module, words, bptt, advance=bar.advance)

    def check_distances(self) -> None:
        """One line unless the encoder has syntactic distances (what ``trees`` reads)."""
        if self._tree_signal_kind() != "distances":
            raise CheckpointError(
                f"checkpoint {self.source}: its encoder {type(self.encoder).__name__} has no "
                "syntactic distances, so no tree can be induced; parse F1 needs a model such as "
                "ON-LSTM (model=onlstm)"
            )

    @_own_kernels
    def trees(
        self,
        sentences: Iterable[str | Sequence[str]],
        layer: int | None = None,
        batch_size: int = 64,
        *,
        tokenized: bool = False,
    ) -> list[SentenceTrees]:
        """Each sentence's greedy tree per layer from ON-LSTM's syntactic distances (Sec. 5.2,
        read as ``<eos> w_1 .. w_n <eos>``); ``layer`` (1 = lowest): that layer only. Each
        result holds the trees as bracket strings and, through ``nltk_trees()``, as
        ``nltk.Tree`` objects. ``tokenized``: as `words` takes it."""
        from treernn.parsing.induce import induce_distances, trees_from_distances
        from treernn.parsing.trees import to_bracketed

        self.check_distances()
        sentences = _sentence_list(sentences)
        words = _numbered_words(self, sentences, tokenized=tokenized)
        vocab = self.vocab
        distances = induce_distances(
            self.module.embedding,
            self.encoder,
            [vocab.encode(sentence) for sentence in words],
            vocab.eos_index,
            batch_size,
            names=[f"{n} ({_shown(s)!r})" for n, s in enumerate(sentences, start=1)],
        )
        per_layer = trees_from_distances(distances)
        layers = self._check_layer(layer, len(per_layer))
        return [
            SentenceTrees(
                sentence=_shown(sentence),
                words=sentence_words,
                trees=[to_bracketed(per_layer[k - 1][index], sentence_words) for k in layers],
                layers=layers,
                unknown=[word for word in sentence_words if word not in vocab],
                distances=[distances[index][k - 1].tolist() for k in layers],
                structures=[per_layer[k - 1][index] for k in layers],
            )
            for index, (sentence, sentence_words) in enumerate(zip(sentences, words))
        ]

    # ------------------------------------------------------------------ scoring as minicons does
    # The surface of minicons' IncrementalLMScorer (sequence_score, conditional_score,
    # token_score), on this model's words: every log-probability is in nats (natural log, as
    # minicons and log_probs give it; base_two=True: in bits), a surprisal is in bits (as
    # surprisals and LM-Zoo's table give it). Each sentence is read alone after <eos> from a
    # fresh state; inputs are any iterable, read ahead in slices so that a generator streams.

    @_own_kernels
    def token_score(
        self,
        sentences: Iterable[str | Sequence[str]],
        *,
        include_end: bool = True,
        tokenized: bool = False,
        batch_size: int = 64,
        progress: bool | None = None,
        as_dataframe: bool = False,
    ) -> Any:
        """Per sentence, a `TokenScore` for every token: its ``word``, the ``token`` the model
        read (``<unk>`` for a word outside the vocabulary), ``log_prob`` (nats), ``surprisal``
        (bits), ``unknown``, and ``start``/``end``, the characters of the input string it was read
        from (`TokenScore`; the PTB normalisation lower-cases and rewrites numbers as ``N``, so a
        token's text is ``sentence[start:end]`` read as `words` reads it). The closing ``<eos>``
        ends each sentence unless not ``include_end``; unlike minicons, the first word is scored
        too (it is predicted from ``<eos>``). ``as_dataframe=True``: one pandas DataFrame, a row
        per token (``sentence_id`` and ``token_id`` from 1, as LM-Zoo counts); pandas is optional
        (``pip install pandas``). ``progress``: a bar over the sentences (`treernn.progress`)."""
        from treernn.evaluation.surprisal import bits

        _not_one_string(sentences, "sentences")
        vocab = self.vocab
        results: list[list[TokenScore]] = []
        for _, tokens, values in self._scored(
            ((sentence, "", sentence) for sentence in sentences),
            include_end,
            tokenized,
            batch_size,
            progress,
            "token_score",
            _length_of(sentences),
        ):
            pieces = [*tokens, ("<eos>", None, None)] if include_end else tokens
            results.append(
                [
                    TokenScore(
                        word=word,
                        token=word if word in vocab else "<unk>",
                        log_prob=value,
                        surprisal=bits(value),
                        unknown=word not in vocab,
                        start=start,
                        end=end,
                    )
                    for (word, start, end), value in zip(pieces, values)
                ]
            )
        if not as_dataframe:
            return results
        columns = ("sentence_id", "token_id", *TokenScore.__dataclass_fields__)
        rows = [
            {"sentence_id": number, "token_id": position} | asdict(token)
            for number, sentence in enumerate(results, start=1)
            for position, token in enumerate(sentence, start=1)
        ]
        frame = _dataframe(rows, columns, "token_score(as_dataframe=True)")
        # offsets stay integers, with <NA> where a token has none (not floats and NaN)
        return frame.astype({"start": "Int64", "end": "Int64"})

    @_own_kernels
    def sequence_score(
        self,
        sentences: Iterable[str | Sequence[str]],
        reduction: Any = "mean",
        *,
        base_two: bool = False,
        include_end: bool = True,
        tokenized: bool = False,
        batch_size: int = 64,
        progress: bool | None = None,
        as_dataframe: bool = False,
    ) -> Any:
        """Each sentence's score, minicons' ``sequence_score``: its tokens' log-probabilities
        (nats; ``base_two=True``: bits) reduced by ``reduction``: ``"mean"`` (the default, as
        minicons': the log-probability per token, normalised by the number of tokens), ``"sum"``
        (the sentence's log-probability, `log_probs`'s number) or a function of a 1-D float64
        tensor of them (``lambda x: -x.sum(0).item()``: minicons' surprisal). The tokens are the
        words and the closing ``<eos>`` (not when ``include_end=False``). ``as_dataframe=True``:
        a DataFrame with ``sentence_id`` (from 1), ``sentence``, ``score`` and ``tokens`` (how
        many were scored). ``tokenized``, ``progress``: as `token_score` takes them."""
        rows = []
        _not_one_string(sentences, "sentences")
        for number, (sentence, _, values) in enumerate(
            self._scored(
                ((sentence, "", sentence) for sentence in sentences),
                include_end,
                tokenized,
                batch_size,
                progress,
                "sequence_score",
                _length_of(sentences),
            ),
            start=1,
        ):
            values = [value / math.log(2) for value in values] if base_two else values
            score = _reduced(values, reduction, f"sentence {number}", sentence)
            rows.append(
                {
                    "sentence_id": number,
                    "sentence": _shown(sentence),
                    "score": score,
                    "tokens": len(values),
                }
            )
        if as_dataframe:
            columns = ("sentence_id", "sentence", "score", "tokens")
            return _dataframe(rows, columns, "sequence_score(as_dataframe=True)")
        return [row["score"] for row in rows]

    @_own_kernels
    def conditional_score(
        self,
        prefixes: Iterable[str | Sequence[str]],
        continuations: Iterable[str | Sequence[str]],
        reduction: Any = "mean",
        *,
        base_two: bool = False,
        include_end: bool = False,
        tokenized: bool = False,
        batch_size: int = 64,
        progress: bool | None = None,
        as_dataframe: bool = False,
    ) -> Any:
        """Each continuation's score given its prefix, minicons' ``conditional_score``: the
        sentence ``<eos> prefix continuation`` is read from a fresh state and only the
        continuation's tokens are scored (``include_end=True``: and the closing ``<eos>``),
        reduced as `sequence_score` reduces them (default ``"mean"``; ``"sum"`` is
        ``log p(continuation | prefix)``). Prefix and continuation are tokenised apart (a
        continuation ``hasn't`` is ``has n't``); an empty prefix scores the continuation as a
        sentence. ``as_dataframe=True``: ``item_id``, ``prefix``, ``continuation``, ``score``,
        ``tokens``."""
        prefixes = _sentence_list(prefixes, "prefixes")
        continuations = _sentence_list(continuations, "continuations")
        if len(prefixes) != len(continuations):
            raise ConfigValueError(
                f"conditional_score: {len(prefixes)} prefixes and {len(continuations)} "
                "continuations; give one prefix per continuation"
            )
        rows = []
        for number, ((prefix, continuation), _, values) in enumerate(
            self._scored(
                ((pair, pair[0], pair[1]) for pair in zip(prefixes, continuations)),
                include_end,
                tokenized,
                batch_size,
                progress,
                "conditional_score",
                len(prefixes),
                conditional=True,
            ),
            start=1,
        ):
            values = [value / math.log(2) for value in values] if base_two else values
            score = _reduced(values, reduction, f"continuation {number}", continuation)
            rows.append(
                {
                    "item_id": number,
                    "prefix": _shown(prefix),
                    "continuation": _shown(continuation),
                    "score": score,
                    "tokens": len(values),
                }
            )
        if as_dataframe:
            columns = ("item_id", "prefix", "continuation", "score", "tokens")
            return _dataframe(rows, columns, "conditional_score(as_dataframe=True)")
        return [row["score"] for row in rows]

    @_own_kernels
    def blimp(
        self,
        pairs: Any,
        method: str = "full",
        *,
        include_end: bool = True,
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> Any:
        """BLiMP minimal pairs scored as BLiMP's own evaluation scores them
        (`treernn.evaluation.blimp`): ``pairs`` a BLiMP jsonl file, a list of them, or
        `MinimalPair`s / dicts in BLiMP's keys. ``method``: ``"full"`` (the sentences' whole
        log-probabilities, with ``<eos>`` unless ``include_end=False``), ``"one_prefix"`` (the
        good and bad word given the shared prefix) or ``"two_prefix"`` (the shared word given
        the good and the bad prefix); pairs without the method's keys are left out and counted.
        Returns a `treernn.evaluation.blimp.BlimpResult`: accuracy over all pairs, per paradigm
        (UID), phenomenon (``linguistics_term``) and ``field``, every pair's two scores (nats)
        and which pairs tied (counted wrong)."""
        from treernn.evaluation.blimp import evaluate_blimp, pairs_from

        def score(prefixes: list[str], continuations: list[str], end: bool) -> list[float]:
            return self.conditional_score(
                prefixes,
                continuations,
                reduction="sum",
                include_end=end,
                batch_size=batch_size,
                progress=progress,
            )

        return evaluate_blimp(score, pairs_from(pairs), method, include_end=include_end)

    def _scored(
        self,
        items: Iterable[tuple[Any, Any, Any]],
        include_end: bool,
        tokenized: bool,
        batch_size: int,
        progress: bool | None,
        description: str,
        total: int | None,
        conditional: bool = False,
    ):
        """For each ``(item, prefix, text)``: ``(item, text's tokens, log-probabilities)``, in
        order, the tokens of ``text`` scored after ``<eos>`` and ``prefix``'s words (their
        ``<eos>`` too when ``include_end``). Reads ``items`` a slice at a time."""
        from itertools import islice

        from treernn.evaluation.surprisal import word_log_probs
        from treernn.progress import progress_bar

        iterator = iter(items)
        number = 0
        with progress_bar(progress, total, description, unit="sentence") as bar:
            while chunk := list(islice(iterator, batch_size * _READ_AHEAD_BATCHES)):
                read = []
                for item, prefix, text in chunk:
                    number += 1
                    context = self.words(prefix, tokenized=tokenized) if prefix else []
                    tokens = self._tokens(text, tokenized=tokenized)
                    words = [word for word, _, _ in tokens]
                    label = f"{'continuation' if conditional else 'sentence'} {number}"
                    prefix_label = f"prefix {number}" if conditional else label
                    _check_words(self, prefix_label, _shown(prefix), context, allow_empty=True)
                    _check_words(self, label, text, words, allow_empty=True)
                    read.append((item, context, tokens))
                values = word_log_probs(
                    self.module,
                    [[*context, *(word for word, _, _ in tokens)] for _, context, tokens in read],
                    batch_size,
                    advance=bar.advance,
                )
                for (item, context, tokens), sentence_values in zip(read, values):
                    end = len(context) + len(tokens) + (1 if include_end else 0)
                    yield item, tokens, sentence_values[len(context) : end]


def _length_of(items: Any) -> int | None:
    """How many items there are, where that is known before reading them (a bar's total)."""
    try:
        return len(items)
    except TypeError:  # a generator: the bar counts without a total
        return None


class Classifier(Model):
    """A sentence or sentence-pair classifier (logic, ListOps, SST)."""

    methods = ("predict", "trees (ON-LSTM, Ordered Memory)")

    @property
    def labels(self) -> list[str]:
        return [str(label) for label in self.module.label_names]

    @property
    def pair(self) -> bool:
        """Whether an input is two sentences (logic: premise and hypothesis)."""
        return self.module.num_sentences == 2

    def _sentence(self, text: str | Sequence[str]):
        """One input sentence as the dataset's reader makes it (tokens, leaves, gold tree)."""
        from treernn.data.classification import Sentence
        from treernn.data.raw_text import formula_tokens

        dataset = self.meta.get("dataset")
        stoi = self.vocab.stoi
        tokens = formula_tokens(text) if isinstance(text, str) else list(text)
        try:
            if dataset == "logic":
                from treernn.data.logic import parse_formula

                tokens, positions, tree = parse_formula(" ".join(tokens))
                ids = tuple(stoi[token] for token in tokens)
                leaf_ids = tuple(ids[p] for p in positions)
                leaves = [tokens[p] for p in positions]
                if not self.meta.get("feed_brackets", True):
                    return Sentence(leaf_ids, leaf_ids, tree), leaves
                return Sentence(ids, leaf_ids, tree, tuple(positions)), leaves
            if dataset == "listops":
                from treernn.data.listops import parse_expression

                leaves, _, tree = parse_expression(" ".join(tokens))
                ids = tuple(stoi[token] for token in leaves)
                return Sentence(ids, ids, tree), leaves
        except ValueError as error:
            raise ConfigValueError(f"{_shown(text)!r}: {error}") from None
        # SST: words (lower-cased as the dataset was); the tree encoders need the gold tree,
        # so plain text suits the sequence models
        if self.encoder.input_view != "tokens":
            raise ConfigValueError(
                f"{type(self.encoder).__name__} reads gold trees; predict on {dataset} takes "
                "text for sequence models only"
            )
        words = text.split() if isinstance(text, str) else list(text)
        if self.meta.get("lowercase", True):
            words = [word.lower() for word in words]
        if not words:
            raise ConfigValueError(f"{_shown(text)!r} has no words")
        ids = tuple(self.vocab.encode(words))
        leaves = tuple(range(len(ids)))
        tree = leaves[0] if len(leaves) == 1 else leaves
        return Sentence(ids, ids, tree), words

    def _batch(self, inputs: Sequence[Any]):
        from treernn.data.classification import Collator, Example

        examples, leaves = [], []
        for item in inputs:
            if self.pair:
                if isinstance(item, str) or len(item) != 2:
                    raise ConfigValueError(
                        f"{item!r}: this classifier reads pairs; give (premise, hypothesis)"
                    )
                parts = [self._sentence(part) for part in item]
            else:
                parts = [self._sentence(item)]
            examples.append(Example(tuple(sentence for sentence, _ in parts), label=0))
            leaves.append([words for _, words in parts])
        return Collator(self.vocab.pad_index)(examples).to(self.device), leaves

    @_own_kernels
    def predict(self, inputs: Sequence[Any], batch_size: int = 256) -> list[Prediction]:
        """The label of each input and the probability of every label. An input is a string
        (ListOps ``[MAX 2 9 ]``, an SST sentence) or, for a pair task, a (premise, hypothesis)
        pair (logic ``( not a )``); brackets need no spaces around them."""
        import torch

        if isinstance(inputs, str):
            raise ConfigValueError("inputs: give a list of inputs ([text] for one)")
        labels = self.labels
        results = []
        with torch.no_grad():
            for start in range(0, len(inputs), batch_size):
                batch, _ = self._batch(inputs[start : start + batch_size])
                probabilities = self.module(batch).float().softmax(-1).cpu()  # (B, C)
                for row in probabilities.tolist():
                    best = max(range(len(row)), key=row.__getitem__)
                    results.append(Prediction(labels[best], dict(zip(labels, row))))
        return results

    @_own_kernels
    def trees(
        self, sentences: Sequence[Any], layer: int | None = None, batch_size: int = 256
    ) -> list[SentenceTrees]:
        """Each sentence's induced tree over its leaves (brackets are not leaves): per layer from
        ON-LSTM's distances, one from Ordered Memory's attention. ``layer``: that layer only."""
        from treernn.data.classification import Collator, Example
        from treernn.evaluation.tree_f1 import induce_batch_trees
        from treernn.parsing.trees import to_bracketed

        if self._tree_signal_kind() is None:
            raise CheckpointError(
                f"{self.source}: its encoder {type(self.encoder).__name__} induces no trees; "
                "trees need ON-LSTM (model=onlstm) or Ordered Memory (model=ordered_memory)"
            )
        if isinstance(sentences, str):
            raise ConfigValueError("sentences: give a list of sentences ([text] for one)")
        results = []
        for start in range(0, len(sentences), batch_size):
            chunk = list(sentences[start : start + batch_size])
            # each sentence on its own (a batch of one-sentence examples), pair task or not
            parts = [self._sentence(sentence) for sentence in chunk]
            examples = [Example((sentence,), label=0) for sentence, _ in parts]
            batch = Collator(self.vocab.pad_index)(examples).to(self.device)
            per_layer, _ = induce_batch_trees(self.module, batch)
            layers = self._check_layer(layer, len(per_layer))
            for row, (text, (_, leaves)) in enumerate(zip(chunk, parts)):
                results.append(
                    SentenceTrees(
                        sentence=_shown(text),
                        words=leaves,
                        trees=[to_bracketed(per_layer[k - 1][row], leaves) for k in layers],
                        layers=layers,
                        structures=[per_layer[k - 1][row] for k in layers],
                    )
                )
        return results


class DependencyLanguageModel(Model):
    """A dependency-tree language model (TreeLSTM / LdTreeLSTM, Zhang et al. 2016), or a
    sequential one trained on the same data (task=dependency_lm)."""

    methods = ("score", "generate (tree models)")

    @_own_kernels
    def score(self, trees: Sequence[Any], batch_size: int = 128, unk_penalty: float = 0.0):
        """``log p`` (nats) of each tree's sentence. A tree is a
        `treernn.data.dependency.DependencyTree` or a ``(words, heads)`` pair (heads
        1-based, 0 for the root); words are normalised as the training data was (lower case,
        numbers where the run replaced them). ``unk_penalty``: nats off per ``<unk>`` word."""
        from treernn.data.dependency import DependencyTree
        from treernn.evaluation.tree_scoring import score_trees

        given = [
            tree
            if isinstance(tree, DependencyTree)
            else DependencyTree(tuple(tree[0]), tuple(tree[1]), ("dep",) * len(tree[0]))
            for tree in trees
        ]
        return score_trees(self.module, given, batch_size, unk_penalty).tolist()

    @_own_kernels
    def generate(
        self,
        n: int,
        trees: Sequence[Any] | str | Path | None = None,
        max_nodes: int = 30,
        classifier_epochs: int = 2,
        max_train_sentences: int = 3000,
        seed: int = 0,
    ) -> Generation:
        """``n`` trees sampled as Section 3.4 of the paper does, after training the four edge
        classifiers on ``trees`` (DependencyTrees or a CoNLL-U file; default: the run's training
        file under ``$TREERNN_DATA_DIR``), a tenth of them held out to measure the classifiers."""
        import torch

        from treernn.evaluation.generation import (
            classifier_accuracy,
            edge_features,
            sample_tree,
            train_classifiers,
        )

        if self.encoder.input_view != "dependency_tree":
            raise UnsupportedMethodError(
                f"generate: {self.source} is a sequence model; generate needs a tree language "
                "model (task=dependency_lm, td_treelstm or ld_treelstm)"
            )
        torch.manual_seed(seed)
        training = self._training_trees(trees)[:max_train_sentences]
        held_out = max(1, len(training) // 10)
        features, labels = edge_features(self.module, training[held_out:])
        test_features, test_labels = edge_features(self.module, training[:held_out])
        classifiers = train_classifiers(features, labels, epochs=classifier_epochs)
        accuracy = classifier_accuracy(classifiers, test_features, test_labels)
        samples = [sample_tree(self.module, classifiers, max_nodes) for _ in range(n)]
        return Generation(samples, accuracy)

    def _training_trees(self, trees: Sequence[Any] | str | Path | None) -> list[Any]:
        from treernn.evaluation.tree_scoring import read_conll

        if trees is not None and not isinstance(trees, (str, Path)):
            return list(trees)
        path = trees
        if path is None:
            from treernn.data.download import default_data_dir

            train_file = self.meta.get("train_file")
            if not train_file:
                raise ConfigValueError(
                    "generate: this model does not name its training file; pass trees="
                )
            path = default_data_dir() / train_file
        found, _ = read_conll(path, "skip", projective_only=True, max_length=100)
        return found
