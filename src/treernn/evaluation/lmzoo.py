"""LM-Zoo's contract for a treernn language model: what ``python -m treernn lmzoo`` writes, so
that tools built on LM-Zoo (the ``syntaxgym`` package among them) can call a treernn model as
they call an LM-Zoo image (LM-Zoo's "Language model Docker API").

- ``tokenize``: one line per input sentence, its tokens separated by one space: the words as
  the model's tokenizer writes them (PTB's normalisation for PTB models:
  `treernn.data.raw_text.ptb_words`), then ``<eos>``. A word outside the vocabulary is written
  as it is, as LM-Zoo's GRNN image writes it; ``unk=True`` writes ``<unk>`` instead, as its
  ON-LSTM image does (the ``syntaxgym`` package then has to guess from the text where the
  unknown words stood);
- ``unkify``: one line per sentence, ``0`` or ``1`` per token of ``tokenize``'s line (``1``:
  the model reads it as ``<unk>``);
- ``get-surprisals``: the table of `treernn.evaluation.surprisal.write_surprisal_table`,
  ``sentence_id token_id token surprisal`` (tab-separated, ids from 1, surprisal in bits),
  one row per token of ``tokenize``'s line, the tokens the same;
- ``spec``: the model's description (`spec`), with LM-Zoo's keys: ``name``, ``ref_url``,
  ``image`` (``maintainer``, ``version``, ``datetime``, ``supported_features``, ``gpu``),
  ``vocabulary`` (``items``, ``unk_types``, ``prefix_types``, ``suffix_types``,
  ``special_types``) and ``tokenizer`` (``type``, ``cased``, ``drop_token_pattern``,
  ``behaviors``).

Each sentence is read alone after ``<eos>`` from a fresh state (`shared_surprisals`), so the
first word's surprisal is a real one (LM-Zoo's ON-LSTM image writes 0 for it) and ``<eos>`` is
a suffix type, not a prefix type: it is no token of the output before the first word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: what LM-Zoo's spec calls the model's end-of-sentence and unknown-word tokens here
EOS, UNK = "<eos>", "<unk>"
#: a whitespace-separated chunk of text that PTB's normalisation drops whole: no letter or
#: digit, and none of the symbols the PTB files keep (``$ & # '``)
PTB_DROP_PATTERN = r"^(?:[^\w$&#']|_)+$"
REF_URL = "https://github.com/yikangshen/Ordered-Neurons"
MAINTAINER = "treernn"


def spec(
    name: str,
    vocabulary: Sequence[str],
    version: str,
    datetime: str,
    ref_url: str = REF_URL,
) -> dict[str, Any]:
    """LM-Zoo's ``spec`` of a treernn language model: ``vocabulary`` its tokens (``<pad>``
    left out: the model never reads or writes it), ``version`` the code or file it came from,
    ``datetime`` when the checkpoint or export was written."""
    items = [token for token in vocabulary if token != "<pad>"]
    return {
        "name": name,
        "ref_url": ref_url,
        "image": {
            "maintainer": MAINTAINER,
            "version": version,
            "datetime": datetime,
            "supported_features": {
                "tokenize": True,
                "unkify": True,
                "get_surprisals": True,
                "get_predictions": False,
                "mount_checkpoint": False,
            },
            "gpu": {"required": False, "supported": True},
        },
        "vocabulary": {
            "items": items,
            "unk_types": [UNK] if UNK in items else [],
            "prefix_types": [],
            "suffix_types": [EOS],
            "special_types": [],
        },
        "tokenizer": {
            "type": "word",
            "cased": False,
            "drop_token_pattern": PTB_DROP_PATTERN,
            "behaviors": ["ptb"],
        },
    }


def token_lines(
    sentences: Sequence[Sequence[str]], known: Callable[[str], bool], unk: bool = False
) -> list[str]:
    """``tokenize``'s lines for sentences given as their words (module docstring)."""
    return [
        " ".join([*(word if not unk or known(word) else UNK for word in words), EOS])
        for words in sentences
    ]


def unk_lines(sentences: Sequence[Sequence[str]], known: Callable[[str], bool]) -> list[str]:
    """``unkify``'s lines: ``1`` for each word the model reads as ``<unk>``, ``0`` for the
    others and for ``<eos>``."""
    return [
        " ".join([*("0" if known(word) else "1" for word in words), "0"]) for words in sentences
    ]


def shared_surprisals(
    task: Any, sentences: Sequence[Sequence[str]], batch_size: int = 64
) -> list[list[float]]:
    """Each sentence's surprisals in bits, one per word and one for the closing ``<eos>``, read
    alone after ``<eos>`` from a fresh state (`treernn.evaluation.surprisal.word_log_probs`).

    Sentences that the model reads as the same ids (they differ only in words outside the
    vocabulary) are one input: scored once, in the order they first appear, and sharing their
    numbers bit for bit, so that a comparison between them is an exact tie and the same
    sentences give the same numbers however they are called (a suite scored by
    ``python -m treernn syntaxgym`` and its sentence file by ``lmzoo get-surprisals``)."""
    from treernn.evaluation.surprisal import bits, word_log_probs

    vocab = task.vocab
    position: dict[tuple[int, ...], int] = {}
    distinct: list[list[str]] = []
    input_of = []
    for words in sentences:
        key = tuple(vocab.encode(words))
        if key not in position:
            position[key] = len(distinct)
            distinct.append(list(words))
        input_of.append(position[key])
    scored = [
        [bits(value) for value in values] for values in word_log_probs(task, distinct, batch_size)
    ]
    return [scored[index] for index in input_of]


ACTIONS = ("tokenize", "unkify", "get-surprisals", "spec")
#: the page of each model's paper or code, LM-Zoo's ``ref_url``; every other treernn language
#: model trains on the AWD-LSTM recipe
REF_URLS = {
    "onlstm": "https://github.com/yikangshen/Ordered-Neurons",
    "ordered_memory": "https://github.com/yikangshen/Ordered-Memory",
}
RECIPE_URL = "https://github.com/salesforce/awd-lstm-lm"


def model_spec(model: Any) -> dict[str, Any]:
    """`spec` of a loaded treernn language model (`treernn.api.LanguageModel`): its name in Hu et
    al.'s ``<model>_<corpus>_<seed>`` form, treernn's version, and the time its checkpoint (or
    export) was written."""
    import datetime as dt

    from treernn import __version__
    from treernn.data.syntaxgym import model_label

    written = model.checkpoint if model.checkpoint is not None else model.source
    stamp = dt.datetime.fromtimestamp(Path(written).stat().st_mtime, dt.timezone.utc)
    return spec(
        model_label(*model_name_parts(model)),
        list(model.vocab.itos),
        f"treernn {__version__}",
        stamp.isoformat(timespec="seconds"),
        REF_URLS.get(str(model.meta.get("model")), RECIPE_URL),
    )


def model_name_parts(model: Any) -> tuple[Any, Any, Any]:
    """A loaded model's name, corpus and seed (None where its files do not say: an export
    written before exports recorded the run's seed)."""
    seed = None
    if model.config is not None:
        seed = model.config.get("seed")
    elif model.export_config is not None:
        recorded = (model.export_config.get("provenance") or {}).get("seed")
        seed = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
    return model.meta.get("model"), model.meta.get("dataset"), seed


def lmzoo_output(
    model: Any,
    action: str,
    sentences: Sequence[str] = (),
    unk: bool = False,
    batch_size: int = 64,
) -> str:
    """What LM-Zoo's binary ``action`` writes for ``sentences`` (one per input line; a blank
    line keeps its place and is its ``<eos>`` alone), for a loaded treernn language model."""
    import io
    import json

    from treernn.errors import ConfigValueError
    from treernn.evaluation.surprisal import write_surprisal_table

    if action not in ACTIONS:
        raise ConfigValueError(f"lmzoo {action!r}: use one of {', '.join(ACTIONS)}")
    if action == "spec":
        return json.dumps(model_spec(model)) + "\n"
    vocab = model.vocab
    words = [model.words(sentence) for sentence in sentences]

    def known(word: str) -> bool:
        return word in vocab

    if action == "tokenize":
        return "".join(line + "\n" for line in token_lines(words, known, unk))
    if action == "unkify":
        return "".join(line + "\n" for line in unk_lines(words, known))
    if UNK not in vocab:
        unknown = [word for sentence in words for word in sentence if not known(word)]
        if unknown:
            raise ConfigValueError(
                f"{unknown[0]!r} is not in the model's vocabulary, which has no <unk> to read "
                "unknown words as"
            )
    surprisals = shared_surprisals(model.module, words, batch_size)
    rows = [
        list(zip(line.split(" "), values))
        for line, values in zip(token_lines(words, known, unk), surprisals)
    ]
    table = io.StringIO()
    write_surprisal_table(rows, table)
    return table.getvalue()
