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
(`treernn.hub`) write.
"""

from __future__ import annotations

import inspect
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treernn.errors import CheckpointError
from treernn.kernels.choices import RECORD, RUN_RECORD
from treernn.trust import UntrustedClass, import_trusted, user_prefixes

FORMAT = "treernn-model"
#: the export format this code writes and reads; a newer one is refused
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.txt"
CARD_FILE = "README.md"
#: every file an export may hold: what ``from_pretrained`` downloads from a Hub repository
EXPORT_FILES = [CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE, CARD_FILE, RECORD]

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
    """Whether ``path`` is a directory written by `export`."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("format") == FORMAT
    except (ValueError, AttributeError):
        return False


# ----------------------------------------------------------------------------- writing
def export(model: Any, out: str | Path, commit: str | None = None) -> Path:
    """Write ``model`` (a `treernn.api.Model` loaded from a checkpoint) to the directory
    ``out`` (module docstring); returns it."""
    if model.config is None or model.checkpoint is None:
        raise CheckpointError(f"{model.source} is an export already: copy its directory")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"{out} is not empty: export into a new directory")
    config, vocab_tokens, choices = _from_checkpoint(model, commit)
    _write(model.module.to("cpu"), config, vocab_tokens, choices, out)
    return out


def save(model: Any, out: str | Path) -> Path:
    """Write any loaded ``model`` to ``out`` as `export` does: one loaded from a checkpoint
    exactly as ``export`` writes it; one loaded from an export with that export's config, its
    kernels' choices and the model's present weights. An export's files already in ``out`` are
    replaced: check ``out`` with `check_target` first."""
    out = Path(out)
    if model.checkpoint is None:
        config = dict(model.export_config, format_version=FORMAT_VERSION)
        vocab_tokens = _tokens(model.module.vocab)
        choices = Path(model.source) / RECORD
    else:
        config, vocab_tokens, choices = _from_checkpoint(model, None)
    _write(model.module, config, vocab_tokens, choices, out)
    return out


def check_target(out: Path) -> None:
    """``out`` is absent, an empty directory or an export, else one line: saving replaces an
    export's files, never another directory's."""
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"{out} is a file: save into a directory")
    if out.is_dir() and any(out.iterdir()) and not is_export(out):
        raise CheckpointError(
            f"{out} holds files and is not an exported model (no {CONFIG_FILE} of format "
            f"{FORMAT!r}): save into a new or empty directory, or over an export"
        )


def _from_checkpoint(
    model: Any, commit: str | None
) -> tuple[dict[str, Any], list[str], Path | None]:
    """The ``config.json`` of a model loaded from a checkpoint, its vocabulary's tokens and
    where its run keeps the kernels' choices (None for a checkpoint outside a run)."""
    from treernn import __version__
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
    provenance = _provenance(run_dir, checkpoint, commit)
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
    return config, vocab_tokens, run_dir / RUN_RECORD if run_dir is not None else None


def _write(
    module: Any, config: dict[str, Any], vocab_tokens: list[str], choices: Path | None, out: Path
) -> None:
    """The export's files in ``out``; ``choices``: the kernels' choices to keep, where that file
    exists (else an earlier export's are removed: the directory holds this model alone)."""
    from safetensors.torch import save_model

    out.mkdir(parents=True, exist_ok=True)
    # safetensors copies every tensor to the CPU as it writes: the model stays where it is
    save_model(module, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / WEIGHTS_FILE).chmod(0o644)  # safetensors writes it readable by its owner only
    (out / VOCAB_FILE).write_text("".join(f"{token}\n" for token in vocab_tokens), "utf-8")
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / CARD_FILE).write_text(model_card(config), encoding="utf-8")
    kept = out / RECORD
    if choices is not None and choices.is_file():
        if not (kept.exists() and kept.samefile(choices)):
            shutil.copyfile(choices, kept)
    else:
        kept.unlink(missing_ok=True)


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


def _provenance(run_dir: Path | None, checkpoint: Path, commit: str | None) -> dict[str, Any]:
    from treernn.checkpoints import inspect_checkpoint

    info = inspect_checkpoint(checkpoint)
    record: dict[str, Any] = {
        "checkpoint": checkpoint.name,
        "epoch": info.epoch,
        "global_step": info.global_step,
        "command": None,
        "commit": commit,
        "metrics": {},
    }
    if run_dir is not None:
        status = _json(run_dir / "status.json")
        if status:
            record["command"] = status.get("command")
            machines = status.get("machines") or [{}]
            record["commit"] = commit or machines[-1].get("commit")
        metrics = _json(run_dir / "metrics.json") or {}
        record["metrics"] = {
            key: value
            for key, value in sorted(metrics.items())
            if key.startswith(("test/", "val/")) and isinstance(value, (int, float))
        }
    return record


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def model_card(config: dict[str, Any]) -> str:
    """The model card (``README.md``) of an export's config."""
    meta, provenance = config["meta"], config["provenance"]
    model = meta.get("model") or "?"
    metrics = provenance.get("metrics") or {}
    lines = [
        f"# treernn {model} on {meta.get('task')}",
        "",
        f"A {config['kind'].replace('_', ' ')} trained with treernn "
        f"{config['treernn_version']}: encoder `{config['encoder']['class']}`, task "
        f"`{config['task']['class']}`, dataset `{meta.get('dataset')}`.",
        "",
        f"- Paper: {PAPERS.get(model, 'a baseline of the treernn papers (no paper of its own)')}",
        f"- Trained by: `{provenance.get('command') or 'unknown command'}` at commit "
        f"`{provenance.get('commit') or 'unknown'}`; exported from `{provenance['checkpoint']}` "
        f"(epoch {provenance['epoch']}, step {provenance['global_step']}).",
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
        "```python",
        "import treernn",
        'model = treernn.load("path/to/this/directory")',
        "```",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- reading
def load_export(path: str | Path, kind: str | None = None, command: str = "load") -> Exported:
    """The model of an export directory, built from classes of treernn only (module docstring);
    ``kind``: refuse another kind of model before building it."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    path = Path(path)
    config = read_config(path)
    found_kind = config.get("kind")
    if kind is not None and found_kind != kind:
        raise CheckpointError(
            f"{command}: {path} is an exported {str(found_kind).replace('_', ' ')}; {command} "
            f"needs a {kind.replace('_', ' ')}"
        )
    from treernn.encoders.base import Encoder
    from treernn.tasks.base import Task

    task_class = _trusted(config["task"]["class"], ("treernn.tasks.",), Task, path)
    encoder_class = _trusted(
        config["encoder"]["class"], ("treernn.encoders.", *user_prefixes()), Encoder, path
    )
    task_arguments = dict(config["task"].get("arguments", {}))
    encoder_arguments = dict(config["encoder"].get("arguments", {}))
    for where, arguments in (("task", task_arguments), ("encoder", encoder_arguments)):
        _refuse_targets(arguments, f"its {where} arguments", f"exported model {path}")
    vocab = _read_vocabulary(path, config.get("vocabulary", {}))
    torch.set_flush_denormal(bool(config.get("flush_denormal", True)))

    def encoder(**sizes: Any) -> Any:
        return encoder_class(**encoder_arguments, **sizes)

    module = task_class(encoder=encoder, vocab=vocab, **task_arguments)
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"exported model {path} has no {WEIGHTS_FILE}")
    try:
        missing, unexpected = load_model(module, str(weights), strict=False, device="cpu")
    except (SafetensorError, OSError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"exported model {path}: {WEIGHTS_FILE} cannot be read ({first})"
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"exported model {path}: {WEIGHTS_FILE} does not fit its config (missing "
            f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    return Exported(module.eval(), str(found_kind), dict(config.get("meta", {})), config)


def read_config(path: Path) -> dict[str, Any]:
    """The ``config.json`` of the export directory ``path``; one line where it cannot be read,
    is not an export's or has a format version newer than this code reads."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(
            f"exported model {path}: {CONFIG_FILE} cannot be read ({error})"
        ) from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not an exported treernn model: its {CONFIG_FILE} is not of format "
            f"{FORMAT!r}"
        )
    version = config.get("format_version")
    if not isinstance(version, int):
        raise CheckpointError(f"exported model {path}: {CONFIG_FILE} has no format_version")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"exported model {path} has format version {version}; this treernn reads versions up "
            f"to {FORMAT_VERSION}: upgrade treernn"
        )
    for key in ("task", "encoder", "kind"):
        if key not in config:
            raise CheckpointError(f"exported model {path}: {CONFIG_FILE} has no {key!r}")
    return config


def _trusted(target: Any, prefixes: tuple[str, ...], base: type, path: Path) -> type:
    """The class an export names, if it is a ``base`` subclass under ``prefixes``; else one
    line, and nothing outside ``prefixes`` is imported."""
    try:
        found = import_trusted(target, prefixes)
    except UntrustedClass as refused:
        if refused.why == "untrusted":
            raise CheckpointError(
                f"exported model {path} names the class {target!r}, which is not one of "
                f"{', '.join(p.rstrip('.') for p in prefixes)}; refused (nothing was built)"
            ) from None
        if refused.why == "missing":
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


def _read_vocabulary(path: Path, spec: dict[str, Any]) -> Any:
    from treernn.data.vocab import Vocabulary

    file = path / VOCAB_FILE
    if not file.is_file():
        raise CheckpointError(f"exported model {path} has no {VOCAB_FILE}")
    text = file.read_text(encoding="utf-8")
    tokens = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    if spec.get("form", "vocabulary") == "list":
        return tokens
    return Vocabulary.from_state_dict({"itos": tokens})
