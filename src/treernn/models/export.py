"""Models people can share: a trained model as a directory of data, read back without running
anything from it.

``python -m treernn export --ckpt CKPT --out DIR`` (`export`) writes

- ``model.safetensors``: the weights (the NT-ASGD average where the run kept one, as testing
  reads them), tensors only;
- ``config.json``: ``format: treernn-model``, ``format_version``, the model's kind, the task and
  encoder classes with their constructor arguments as plain values (no ``_target_``, no
  optimiser), what the data's reader needs (dataset, lower-casing, brackets) and where the model
  came from (run command, commit, checkpoint, metrics);
- ``vocab.txt``: the vocabulary, one token per line, in id order;
- ``README.md``: a model card (task, data, model and paper, metrics with the command and commit
  that produced them, how to load it);
- ``kernel_choices.json``, where the run recorded one: the fast kernels' choices (GEMM backend,
  loop placement, precision per shape, `treernn.kernels.choices`), which a loaded export
  uses as the run did.

`load_export` reads it back: a format version newer than this code's is refused with one
line; each class named in ``config.json`` must be a treernn task (``treernn.tasks.*``) or encoder
(``treernn.encoders.*``, or a module trusted with ``TREERNN_TRUSTED_MODULES``) that exists in this
version, else nothing is built; the arguments are plain JSON values, and a ``_target_`` among them
is refused. The weights are read with safetensors, which holds tensors only. The numbers it gives
are those of the checkpoint it was exported from, bit for bit (the same classes run the same
weights; ``flush_denormal`` is kept too).

`save` writes the same directory for any loaded model, an export's included (its config as
read, with the model's present weights): it is what ``save_pretrained`` and ``push_to_hub``
(`treernn.models.hub`) write.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treernn.errors import CheckpointError, OutputError, StorageError, UserError
from treernn.files import MB, is_full_disk, read_limited
from treernn.models import export_format as fmt
from treernn.models.export_format import (
    CARD_FILE,
    CHOICES_FILE,
    CONFIG_FILE,
    EXPORT_FILES,
    FORMAT,
    FORMAT_VERSION,
    VOCAB_FILE,
    WEIGHTS_FILE,
    check_links,
    read_config,
    refused,
)
from treernn.models.kinds import KINDS
from treernn.models.trust import UntrustedClass, import_trusted, user_prefixes

__all__ = [
    "EXPORT_FILES",
    "FORMAT",
    "FORMAT_VERSION",
    "check_links",
    "export",
    "load_export",
    "read_config",
    "save",
]

#: the DataModule class of a run -> the dataset name its reader is known by
DATASETS = {
    "PTBDataModule": "ptb",
    "LogicInferenceDataModule": "logic",
    "ListOpsDataModule": "listops",
    "SSTDataModule": "sst",
    "DependencyDataModule": "dependency",
}
#: the paper each model implements, for the model card
PAPERS = {
    "onlstm": "Shen, Tan, Sordoni, Courville (2019). Ordered Neurons: Integrating Tree Structures "
    "into Recurrent Neural Networks. ICLR.",
    "ordered_memory": "Shen, Tan, Hosseini, Lin, Sordoni, Courville (2019). Ordered Memory. "
    "NeurIPS.",
    "td_treelstm": "Zhang, Lu, Lapata (2016). Top-down Tree Long Short-Term Memory Networks. "
    "NAACL.",
    "ld_treelstm": "Zhang, Lu, Lapata (2016). Top-down Tree Long Short-Term Memory Networks. "
    "NAACL.",
}
#: task constructor arguments that only training uses
TRAINING_ONLY = ("optimizer", "scheduler")


@dataclass
class Exported:
    """A model read from an export directory: the task module, its kind and its metadata."""

    module: Any
    kind: str
    meta: dict[str, Any]
    config: dict[str, Any]
    #: the kernels' choices its run recorded (``kernel_choices.json``)
    choices: dict[str, str]
    #: names its contents: the SHA-256 of ``config.json``, which records the other files' hashes
    key: str


# ----------------------------------------------------------------------------- metadata
def meta_from_config(cfg: Any) -> dict[str, Any]:
    """What a model needs to know about its run to read new inputs: task, model and dataset
    names and the reader's settings (``feed_brackets``, ``lowercase``, ``train_file``)."""
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else cfg
    task = config.get("task", {})
    datamodule = task.get("datamodule", {}) or {}
    class_name = str(datamodule.get("_target_", "")).rpartition(".")[2]
    return {
        "task": task.get("name"),
        "model": config.get("model", {}).get("name"),
        "dataset": DATASETS.get(class_name, task.get("name")),
        "feed_brackets": bool(datamodule.get("feed_brackets", True)),
        "lowercase": bool(datamodule.get("lowercase", True)),
        "train_file": datamodule.get("train_file"),
    }


def is_export(path: str | Path) -> bool:
    """Whether ``path`` is meant as an exported model: a directory with a ``config.json`` (a run
    directory keeps its config in ``.hydra/``); `load_export` says what is wrong with it."""
    path = Path(path)
    return path.is_dir() and os.path.lexists(path / CONFIG_FILE)


# ----------------------------------------------------------------------------- writing
def export(model: Any, out: str | Path, commit: str | None = None, overwrite: bool = False) -> Path:
    """Write ``model`` (a `treernn.api.Model` loaded from a checkpoint) to the directory
    ``out`` (module docstring); returns it. ``out`` may be new or empty; an export there is
    replaced whole with ``overwrite`` (``--force``) and refused without it; a directory holding
    anything else is always refused (`save`'s rule)."""
    if model.config is None or model.checkpoint is None:
        raise CheckpointError(f"{model.source} is an export already: copy its directory")
    out = Path(out)
    _check_target(out, replace_export=overwrite)
    config, vocab_tokens, choices = _from_checkpoint(model, commit)
    _write(model.module.to("cpu"), config, vocab_tokens, choices, out)
    return out


def save(model: Any, out: str | Path) -> Path:
    """Write any loaded ``model`` to ``out`` as `export` does: one loaded from a checkpoint
    exactly as ``export`` writes it; one loaded from an export with that export's config, its
    kernels' choices and the model's present weights. ``out`` may be new, empty or an export,
    which is replaced whole (never written into: a link in it is removed, never followed), as
    ``huggingface_hub``'s ``save_pretrained`` replaces; a directory holding anything else is
    refused. The rule is `export`'s with ``--force``: what may be replaced is the same, and the
    command line, like its other commands, asks before it replaces what the user named."""
    out = Path(out)
    _check_target(out, replace_export=True)
    if model.checkpoint is None:
        config = {key: value for key, value in model.export_config.items() if key != "files"}
        config["format_version"] = FORMAT_VERSION
        # an export written before cards left local paths out shares none either once saved
        config["provenance"] = shareable(config["provenance"])
        vocab_tokens = _tokens(model.module.vocab)
        from treernn import kernels

        choices = kernels.context.export_record(model.export_choices)
    else:
        config, vocab_tokens, choices = _from_checkpoint(model, None)
    _write(model.module, config, vocab_tokens, choices, out)
    return out


def check_target(out: str | Path, overwrite: bool = True) -> None:
    """``out`` is absent, an empty directory or (with ``overwrite``) an export, else one line:
    saving replaces an export, never another directory."""
    _check_target(Path(out), replace_export=overwrite)


def _check_target(out: Path, replace_export: bool) -> None:
    if out.is_symlink():
        raise OutputError(f"{out} is a symbolic link: save into a directory of its own")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file: save into a new directory")
    above = next((p for p in Path(os.path.abspath(out)).parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise OutputError(f"{out}: {above} on its path is a file; save into a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return
    try:  # read only: an export whose files are links is replaced whole, never written through
        read_config(out, follow_links=True)
    except CheckpointError:
        raise OutputError(
            f"{out} holds files and is not an exported model (no readable {CONFIG_FILE} of format "
            f"{FORMAT!r}): save into a new or empty directory, or over an export"
        ) from None
    if not replace_export:
        raise OutputError(
            f"{out} holds an exported model already: add --force to replace it (it is replaced "
            "whole), or export into a new directory"
        )


def _from_checkpoint(
    model: Any, commit: str | None
) -> tuple[dict[str, Any], list[str], bytes | None]:
    """The ``config.json`` of a model loaded from a checkpoint, its vocabulary's tokens and
    the kernels' choices its run recorded (None for a checkpoint outside a run, or a run that
    recorded none)."""
    from treernn import __version__, kernels
    from treernn.checkpoints import constructor_config

    cfg = model.config
    checkpoint = model.checkpoint
    stored = _stored_task_kwargs(checkpoint)
    vocab_tokens, vocab_form = _vocabulary(model.module.vocab, stored)
    task_arguments = {
        key: value
        for key, value in _plain(cfg.task.module).items()
        if key != "_target_" and key not in TRAINING_ONLY
    }
    task_arguments.update(
        {
            key: value
            for key, value in stored.items()
            if key != "vocab" and _is_plain(value) and value is not None
        }
    )
    encoder = _plain(constructor_config(cfg.model))
    encoder_class = encoder.pop("_target_")
    encoder.pop("_partial_", None)
    for where, arguments in (("task", task_arguments), ("encoder", encoder)):
        _refuse_targets(arguments, f"the run's {where} arguments", "export")
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None
    provenance = _provenance(run_dir, checkpoint, commit, cfg.get("seed"))
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "treernn_version": __version__,
        "kind": model.kind,
        "meta": model.meta,
        "task": {"class": str(cfg.task.module._target_), "arguments": task_arguments},
        "encoder": {"class": str(encoder_class), "arguments": encoder},
        "vocabulary": {"file": VOCAB_FILE, "form": vocab_form},
        "flush_denormal": bool(cfg.get("flush_denormal", True)),
        "provenance": provenance,
    }
    # the kernels' choices the run made: a loaded export computes as the run did
    return config, vocab_tokens, kernels.context.export_record(run_dir)


def _write(
    module: Any, config: dict[str, Any], vocab_tokens: list[str], choices: bytes | None, out: Path
) -> None:
    """The export's files, written whole or not at all: into a temporary folder beside ``out``,
    ``config.json`` last with every other file's size and SHA-256, then renamed into place (an
    export that was there is moved aside first and removed after). ``choices``: the kernels'
    choices to keep (``kernel_choices.json``), where the run made any."""
    from safetensors.torch import save_model

    out = Path(os.path.abspath(out))
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        # safetensors copies every tensor to the CPU as it writes: the model stays where it is
        save_model(module, str(partial / WEIGHTS_FILE), metadata={"format": "pt"})
        _canonical_header(partial / WEIGHTS_FILE)
        files = {
            VOCAB_FILE: "".join(f"{token}\n" for token in vocab_tokens).encode(),
            CARD_FILE: model_card(config).encode(),
        }
        if choices is not None:
            files[CHOICES_FILE] = choices
        for name, data in files.items():
            _write_synced(partial / name, data)
        config = dict(config)
        config["files"] = {
            name: fmt.file_record(partial / name) for name in sorted([WEIGHTS_FILE, *files])
        }
        _write_synced(partial / CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode())
        _move_into_place(partial, out)
    except BaseException as error:
        shutil.rmtree(partial, ignore_errors=True)
        if is_full_disk(error):
            raise StorageError(
                f"cannot write {out}: {os.strerror(error.errno)}; nothing was written. Free some "
                "space, or save to a disk with room"
            ) from None
        if isinstance(error, OSError):
            raise OutputError(
                f"cannot write the exported model {out}: {error.strerror or error}; nothing was "
                "written. Give --out a folder you can write"
            ) from None
        raise


def _canonical_header(path: Path) -> None:
    """Rewrite a safetensors file's header with its keys sorted: safetensors writes the
    metadata map (a tied weight's alias beside ``format``) in an order that changes from one
    process to the next, and ``config.json`` records the file's hash, so that two exports of one
    model would differ. The tensors' offsets count from the end of the header and do not change;
    the header is padded with spaces to 8 bytes, as safetensors pads it."""
    import struct

    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.dumps(json.loads(data[8 : 8 + length]), sort_keys=True, separators=(",", ":"))
    encoded = header.encode()
    encoded += b" " * (-len(encoded) % 8)
    path.unlink()  # safetensors writes it readable by its owner only; rewritten as 0o644
    _write_synced(path, struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _move_into_place(partial: Path, out: Path) -> None:
    """Rename the written folder to ``out``: an empty folder there is removed first; an export
    there is moved aside, and removed once the new one is in place (``shutil.rmtree`` removes a
    link, never what it points to)."""
    aside = None
    if out.is_dir() and any(out.iterdir()):
        aside = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        os.rename(out, aside)
    elif out.is_dir():
        out.rmdir()
    try:
        os.rename(partial, out)
    except BaseException:
        if aside is not None:
            os.rename(aside, out)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _stored_task_kwargs(checkpoint: Path) -> dict[str, Any]:
    from treernn.checkpoints import read_checkpoint

    return dict(read_checkpoint(checkpoint, mmap=True)["treernn"].get("task_kwargs", {}))


def _vocabulary(vocab: Any, stored: dict[str, Any]) -> tuple[list[str], str]:
    """The tokens in id order and how the task takes them (a Vocabulary or a list)."""
    stored_vocab = stored.get("vocab")
    form = "vocabulary" if isinstance(stored_vocab, dict) else "list"
    return _tokens(vocab), form


def _tokens(vocab: Any) -> list[str]:
    """The tokens of a vocabulary (a Vocabulary or a list) in id order, one per line to be."""
    tokens = list(vocab.itos) if hasattr(vocab, "itos") else list(vocab)
    for token in tokens:
        if "\n" in token or "\r" in token:
            raise CheckpointError(
                f"the vocabulary has a token with a line break ({token!r}); vocab.txt keeps one "
                "token per line"
            )
    return tokens


def _plain(node: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if isinstance(node, dict):
        return dict(node)
    return OmegaConf.to_container(node, resolve=True)


def _is_plain(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _refuse_targets(node: Any, what: str, source: str) -> None:
    """A ``_target_`` (something to build) anywhere in ``node``: refused with one line."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "_target_" in item:
                raise CheckpointError(
                    f"{source}: {what} name {item['_target_']!r} to build; an exported model "
                    "holds plain values only (refused, nothing was built)"
                )
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _provenance(
    run_dir: Path | None, checkpoint: Path, commit: str | None, seed: Any = None
) -> dict[str, Any]:
    """Where the checkpoint came from; ``seed``, the run's, names the model as SyntaxGym's and
    LM-Zoo's outputs do (``<model>_<corpus>_<seed>``)."""
    from treernn.checkpoints import inspect_checkpoint

    info = inspect_checkpoint(checkpoint)
    record: dict[str, Any] = {
        "checkpoint": checkpoint.name,
        "epoch": info.epoch,
        "global_step": info.global_step,
        "command": None,
        "commit": commit,
        "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        "metrics": {},
    }
    if run_dir is not None:
        status = _json(run_dir / "status.json")
        if status:
            record["command"] = status.get("command")
            if commit is None:  # the commit of the attempt that wrote the checkpoint's run last
                attempts = [m for m in status.get("machines") or [] if isinstance(m, dict)]
                record["commit"] = next(
                    (m["commit"] for m in reversed(attempts) if m.get("commit")), None
                )
        metrics = _json(run_dir / "metrics.json") or {}
        record["metrics"] = {
            key: value
            for key, value in sorted(metrics.items())
            if key.startswith(("test/", "val/")) and isinstance(value, (int, float))
        }
    return shareable(record)


#: a local file or folder: absolute, in the home directory, or on a Windows drive
_LOCAL_PATH = re.compile(r"(?:/|~/|~$|[A-Za-z]:[\\/])")


def _names_local_path(text: str) -> bool:
    """Whether ``text`` (a value, or a list of values ``[a,b]``) names a local path."""
    return any(_LOCAL_PATH.match(item.strip()) for item in re.split(r"[\[\],]", text))


def shareable(provenance: dict[str, Any]) -> dict[str, Any]:
    """A run's provenance as an export shares it: the command as it can be typed again
    anywhere (the program by its name, ``python train.py`` or ``treernn-train``, not by the
    path it ran from) and without the overrides that name local files or folders (a run
    directory, a log folder, a checkpoint: ``hydra.run.dir=/tmp/...``), whose keys it lists in
    ``left_out``. Applied again it changes nothing."""
    record = dict(provenance)
    command = record.get("command")
    if not isinstance(command, str) or not command.split():
        return record
    program, *arguments = command.split()
    name = os.path.basename(program)
    words = [f"python {name}" if name.endswith(".py") else name]
    left_out = [str(key) for key in record.get("left_out") or []]
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if _names_local_path(value if equals else argument):
            left_out.append(key.lstrip("+~") if equals else "a path")
        else:
            words.append(argument)
    record["command"] = " ".join(words)
    if left_out:
        record["left_out"] = list(dict.fromkeys(left_out))
    return record


def _json(path: Path) -> dict[str, Any] | None:
    """A run's record for the card, where it is a readable JSON object (else None: the card
    says less)."""
    try:
        value = json.loads(read_limited(path, 16 * MB).decode("utf-8"))
    except (OSError, ValueError, UserError):
        return None
    return value if isinstance(value, dict) else None


#: the license of treernn (LICENSE), which its exports are shared under: the Hub's identifier
LICENSE = "mit"
#: per dataset: its Hugging Face Hub dataset id (None where the Hub has none) and its name
DATASET_CARDS = {
    "ptb": ("ptb-text-only/ptb_text_only", "Penn Treebank (Mikolov et al. 2010)"),
    "sst": ("stanfordnlp/sst", "Stanford Sentiment Treebank"),
    "logic": (None, "Logical inference (Bowman et al. 2015)"),
    "listops": (None, "ListOps (Nangia and Bowman 2018)"),
    "dependency": (None, "a dependency treebank (CoNLL-U)"),
}
#: a metric's name in the run (``test/<name>``) -> the Hub's metric type
METRIC_TYPES = {"ppl": "perplexity", "acc": "accuracy", "f1": "f1", "parse_f1": "f1"}
_SPLITS = {"test": "test", "val": "validation"}


def card_metadata(config: dict[str, Any]) -> dict[str, Any]:
    """The model card's YAML metadata, as the Hugging Face Hub reads it (``huggingface_hub``'s
    ``ModelCardData``): license, library, tags, datasets, metrics and a ``model-index`` with the
    run's recorded test and validation metrics."""
    meta, kind = config["meta"], config["kind"]
    model, dataset = meta.get("model") or "model", meta.get("dataset") or "data"
    hub_dataset, dataset_name = DATASET_CARDS.get(dataset, (None, str(dataset)))
    task_type, task_name = KINDS[kind].card if kind in KINDS else ("other", kind)
    results = []
    for key, value in (config["provenance"].get("metrics") or {}).items():
        split, _, name = key.partition("/")
        if split not in _SPLITS or not isinstance(value, (int, float)):
            continue
        results.append(
            {
                "task": {"type": task_type, "name": task_name},
                "dataset": {
                    "type": hub_dataset or dataset,
                    "name": dataset_name,
                    "split": _SPLITS[split],
                },
                "metrics": [{"type": METRIC_TYPES.get(name, name), "value": value, "name": key}],
            }
        )
    results.sort(key=lambda result: result["dataset"]["split"] != "test")  # test first
    metadata: dict[str, Any] = {
        "license": LICENSE,
        "library_name": "treernn",
        "tags": list(dict.fromkeys(["treernn", model, kind.replace("_", "-"), dataset])),
    }
    if hub_dataset:
        metadata["datasets"] = [hub_dataset]
    if results:
        metrics = [result["metrics"][0]["type"] for result in results]
        metadata["metrics"] = list(dict.fromkeys(metrics))
        metadata["model-index"] = [{"name": f"treernn-{model}-{dataset}", "results": results}]
    return metadata


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """``value`` (dicts, lists, strings, numbers, booleans) as block YAML lines; every string
    is a JSON string, which YAML reads as the same string."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines += [f"{pad}{key}:", *_yaml(item, indent + 2)]
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    else:
        for item in value:
            nested = _yaml(item, indent + 2) if isinstance(item, (dict, list)) else None
            if nested:  # the first key on the dash's line
                lines += [f"{pad}- {nested[0].strip()}", *nested[1:]]
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return lines


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)  # empty
    text = str(value)
    return (
        text
        if re.fullmatch(r"[A-Za-z][\w./-]*", text) and text not in _YAML_WORDS
        else (json.dumps(text))
    )


#: words YAML would read as something other than a string
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def model_card(config: dict[str, Any]) -> str:
    """The model card (``README.md``) of an export's config: Hub metadata (`card_metadata`)
    between ``---`` lines, then what the model is, how it was trained, its metrics and how to
    load it. It names no local path (`shareable`)."""
    meta, provenance = config["meta"], shareable(config["provenance"])
    model = meta.get("model") or "?"
    metrics = provenance.get("metrics") or {}
    command = provenance.get("command")
    trained = f"`{command}`" if command else "a command the run did not record"
    if provenance.get("left_out"):
        trained += f" (local paths left out: {', '.join(provenance['left_out'])})"
    commit = provenance.get("commit")
    trained += (
        f" at commit `{commit}`"
        if commit
        else ", at a commit the run did not record (it ran outside a git checkout)"
    )
    lines = [
        "---",
        *_yaml(card_metadata(config)),
        "---",
        "",
        f"# treernn {model} on {meta.get('task')}",
        "",
        f"A {config['kind'].replace('_', ' ')} trained with treernn "
        f"{config['treernn_version']}: encoder `{config['encoder']['class']}`, task "
        f"`{config['task']['class']}`, dataset `{meta.get('dataset')}`.",
        "",
        f"- Paper: {PAPERS.get(model, 'a baseline of the treernn papers (no paper of its own)')}",
        f"- Trained by: {trained}; exported from `{provenance['checkpoint']}` "
        f"(epoch {provenance['epoch']}, step {provenance['global_step']}).",
        f"- License: {LICENSE.upper()}, as treernn's code (its LICENSE file); the data it was "
        "trained on keeps its own terms.",
        f"- Format: `{FORMAT}` version {config['format_version']} (weights in safetensors, config "
        "and vocabulary as text; loading runs no code from this directory).",
        "",
        "## Metrics",
        "",
    ]
    if metrics:
        lines += ["| metric | value |", "| --- | --- |"]
        lines += [f"| {key} | {value:.6g} |" for key, value in metrics.items()]
    else:
        lines.append("No metrics were recorded with the run.")
    lines += [
        "",
        "## Use",
        "",
        "```bash",
        "pip install treernn",
        "```",
        "",
        "```python",
        "import treernn",
        'model = treernn.load("path/to/this/directory")',
        "```",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- reading
def load_export(
    path: str | Path,
    kind: str | None = None,
    command: str = "load",
    links_within: Path | None = None,
) -> Exported:
    """The model of an export directory, read as data and built from classes of treernn only
    (module docstring); ``kind``: refuse another kind of model before building it;
    ``links_within``: a Hub cache's repository folder, whose snapshot's files are links into it
    (any other link is refused)."""
    import hashlib

    import torch

    path = Path(path)
    follow = links_within is not None
    fmt.check_links(path, links_within)
    raw_config = fmt.read_file(path, CONFIG_FILE, follow)
    config = read_config(path)
    fmt.check_whole(path, config, follow)
    found_kind = config["kind"]
    if kind is not None and found_kind != kind:
        raise CheckpointError(
            f"{command}: {path} is an exported {str(found_kind).replace('_', ' ')}; {command} "
            f"needs a {kind.replace('_', ' ')}"
        )
    task_class, encoder_class = _classes(path, config)
    task_arguments = dict(config["task"]["arguments"])
    encoder_arguments = dict(config["encoder"]["arguments"])
    for where, arguments in (("task", task_arguments), ("encoder", encoder_arguments)):
        _refuse_targets(arguments, f"its {where} arguments", f"exported model {path}")
    _check_arguments(path, task_class, task_arguments, "task", ("encoder", "vocab"))
    _check_arguments(path, encoder_class, encoder_arguments, "encoder", ())
    tokens = fmt.read_vocabulary(path, config, follow)
    tensors = fmt.read_header(path, follow)
    choices = fmt.read_choices(path, follow)

    def build() -> Any:
        from treernn.data.vocab import Vocabulary

        vocab = tokens if config["vocabulary"]["form"] == "list" else Vocabulary(tokens, ())

        def encoder(**sizes: Any) -> Any:
            return encoder_class(**encoder_arguments, **sizes)

        return task_class(encoder=encoder, vocab=vocab, **task_arguments)

    # on the meta device first: nothing is allocated, so a config that asks for more than the
    # weights hold is refused before it costs any memory
    try:
        with torch.device("meta"):
            planned = build()
    except (TypeError, ValueError, RuntimeError, UserError) as error:  # arguments from a file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise refused(
            path, f"its {CONFIG_FILE} does not describe a model that builds ({first})"
        ) from None
    _check_weights(path, planned, tensors)
    torch.set_flush_denormal(bool(config["flush_denormal"]))
    module = build()
    _load_weights(path, module, follow)
    return Exported(
        module.eval(),
        str(found_kind),
        dict(config["meta"]),
        config,
        choices,
        hashlib.sha256(raw_config).hexdigest(),
    )


def _classes(path: Path, config: dict[str, Any]) -> tuple[type, type]:
    """The task and encoder classes an export names: treernn's own (or trusted) classes that
    exist in this version, the task the one its kind is built from."""
    from treernn.encoders.base import Encoder
    from treernn.tasks.base import Task

    task_class = _trusted(config["task"]["class"], ("treernn.tasks.",), Task, path)
    kind = config["kind"]
    expected = KINDS[kind].task
    wanted = import_trusted(expected, ("treernn.tasks.",))
    if not issubclass(task_class, wanted):
        raise refused(
            path,
            f"{CONFIG_FILE} says kind {kind!r}, but its task {config['task']['class']} is not "
            f"a {expected.rpartition('.')[2]}",
        )
    encoder_class = _trusted(
        config["encoder"]["class"], ("treernn.encoders.", *user_prefixes()), Encoder, path
    )
    return task_class, encoder_class


def _check_arguments(
    path: Path, cls: type, arguments: dict[str, Any], where: str, given: tuple[str, ...]
) -> None:
    """The arguments an export gives a constructor are ones it takes, and none it takes from
    elsewhere (``given``)."""
    parameters = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(arguments) - set(parameters) | set(arguments) & set(given))
    if unknown:
        raise refused(
            path,
            f"{CONFIG_FILE}: {where}.arguments {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} not an argument {cls.__name__} takes",
        )


#: torch dtypes -> safetensors' names
_DTYPE_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
    "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


def _check_weights(path: Path, planned: Any, tensors: dict[str, fmt.Tensor]) -> None:
    """The weights' header holds every tensor of the model the config describes (``planned``,
    built on the meta device), with its shape and dtype, and nothing else; a tensor shared by two
    names (tied weights) is stored once."""
    state = planned.state_dict(keep_vars=True)
    stored_once: dict[int, list[str]] = {}
    for name, value in state.items():
        stored_once.setdefault(id(value), []).append(name)
    unexpected = sorted(set(tensors) - set(state))
    if unexpected:
        raise refused(
            path,
            f"{WEIGHTS_FILE} holds {', '.join(unexpected[:3])}, which the model its "
            f"{CONFIG_FILE} describes does not have",
        )
    for names in stored_once.values():
        present = [name for name in names if name in tensors]
        if not present:
            raise refused(
                path,
                f"{WEIGHTS_FILE} has no {names[0]}, which the model its {CONFIG_FILE} "
                "describes needs",
            )
        value = state[names[0]]
        wanted_dtype = _DTYPE_NAMES.get(str(value.dtype).removeprefix("torch."), str(value.dtype))
        for name in present:
            tensor = tensors[name]
            if tensor.shape != tuple(value.shape):
                raise refused(
                    path,
                    f"{WEIGHTS_FILE}: {name} has shape {list(tensor.shape)}, but the model its "
                    f"{CONFIG_FILE} describes needs {list(value.shape)}",
                )
            if tensor.dtype != wanted_dtype:
                raise refused(
                    path,
                    f"{WEIGHTS_FILE}: {name} is stored as {tensor.dtype}, but the model holds "
                    f"{wanted_dtype}",
                )


def _load_weights(path: Path, module: Any, follow: bool) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    try:
        missing, unexpected = load_model(module, str(path / WEIGHTS_FILE), strict=False)
    except (SafetensorError, OSError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise refused(path, f"{WEIGHTS_FILE} cannot be read ({first})") from None
    if missing or unexpected:
        raise refused(
            path,
            f"{WEIGHTS_FILE} does not fit its config (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})",
        )


def _trusted(target: Any, prefixes: tuple[str, ...], base: type, path: Path) -> type:
    """The class an export names, if it is a ``base`` subclass under ``prefixes``; else one
    line, and nothing outside ``prefixes`` is imported."""
    try:
        found = import_trusted(target, prefixes)
    except UntrustedClass as refusal:
        if refusal.why == "untrusted":
            raise CheckpointError(
                f"exported model {path} names the class {target!r}, which is not one of "
                f"{', '.join(p.rstrip('.') for p in prefixes)}; refused (nothing was built)"
            ) from None
        if refusal.why == "missing":
            raise CheckpointError(
                f"exported model {path} names {target}, which does not exist in this version of "
                "treernn"
            ) from None
        found = None
    if not (inspect.isclass(found) and issubclass(found, base)):
        raise CheckpointError(
            f"exported model {path} names {target}, which is not a {base.__name__}; refused"
        )
    return found
