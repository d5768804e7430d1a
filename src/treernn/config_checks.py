"""Checks of the config before anything is built or any data is read.

- Numbers: a value of the wrong type would otherwise fail deep inside a constructor
  (``model.num_layers=2.5``: ``can't multiply sequence by non-int``) or after minutes of data
  loading. The rules go by key name, so they cover every model and task: sizes and counts are
  positive integers, dropouts are probabilities, learning rates are positive, and the trainer's
  counters are integers.
- Choices: the run's own switches (``mode``, ``test_ckpt``, ``task.mode``, ``requeue_signal``) and
  every constructor argument whose annotation lists its values (``Literal["fast", "reference"]``)
  in the model, task, data and trainer configs.
- Keys: a key that the class named by ``_target_`` does not take (``model.weight_drop`` on an
  encoder without DropConnect) instead of a ``TypeError`` from its constructor.

Each failure names the key, the value and what would be valid.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
import os
import signal
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from treernn.errors import ConfigValueError

#: keys of a model/task config that describe it rather than construct it (a model's ``recipe``:
#: its own optimiser settings, which the task configs read)
DESCRIPTIVE_KEYS = ("name", "recipe")

#: the run's own switches (conf/config.yaml, conf/task/*.yaml) and their values
CHOICES: dict[str, tuple[Any, ...]] = {
    "mode": ("fit+test", "fit", "test"),
    "test_ckpt": ("best", "last"),
    "task.mode": ("min", "max"),
}

#: config nodes whose ``_target_`` constructors are checked, with their nested partials
TARGET_NODES = ("model", "task.module", "task.datamodule", "trainer", "builtin_callbacks")

#: the callbacks every run has (conf/builtin_callbacks/default.yaml), which the executor
#: (`treernn.lifecycle.execute`) builds by these keys
BUILTIN_CALLBACKS = (
    "divergence",
    "progress_bar",
    "last_checkpoint",
    "graceful_stop",
    "unvalidated_tail",
)

Check = Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(value: Any) -> bool:
    return _is_int(value) and value >= 1


def non_negative_int(value: Any) -> bool:
    return _is_int(value) and value >= 0


def epoch_count(value: Any) -> bool:
    return _is_int(value) and value >= -1


def probability(value: Any) -> bool:
    return _is_number(value) and 0.0 <= value < 1.0


def positive_number(value: Any) -> bool:
    return _is_number(value) and value > 0


def non_negative_number(value: Any) -> bool:
    return _is_number(value) and value >= 0


def batch_limit(value: Any) -> bool:
    """Lightning's limit_*_batches: a count, or a fraction in [0, 1]."""
    return non_negative_int(value) or (_is_number(value) and 0.0 <= value <= 1.0)


#: (description, example, check) by rule name
RULES: dict[str, tuple[str, str, Check]] = {
    "positive_int": ("a positive integer", "2", positive_int),
    "non_negative_int": ("an integer >= 0", "0", non_negative_int),
    "epoch_count": ("an integer >= -1 (-1: no limit)", "10", epoch_count),
    "probability": ("a probability in [0, 1)", "0.3", probability),
    "positive_number": ("a positive number", "0.001", positive_number),
    "non_negative_number": ("a number >= 0", "0.25", non_negative_number),
    "batch_limit": ("a batch count or a fraction in [0, 1]", "1.0", batch_limit),
}

TRAINER_RULES = {
    "max_epochs": "epoch_count",
    "max_steps": "epoch_count",
    "min_epochs": "non_negative_int",
    "num_nodes": "positive_int",
    "accumulate_grad_batches": "positive_int",
    "check_val_every_n_epoch": "positive_int",
    "log_every_n_steps": "positive_int",
    "num_sanity_val_steps": "epoch_count",
    "gradient_clip_val": "non_negative_number",
    "limit_train_batches": "batch_limit",
    "limit_val_batches": "batch_limit",
    "limit_test_batches": "batch_limit",
}

#: the run's own numbers (conf/config.yaml), and the example each error gives
TOP_RULES = {"checkpoint_minutes": "positive_number", "threads": "positive_int"}
EXAMPLES = {
    "threads": "1 (or null: one per core)",
    "checkpoint_minutes": "10 (its default: TREERNN_CHECKPOINT_MINUTES, unset or a number)",
}

NON_NEGATIVE_COUNTS = ("num_workers", "mlp_layers", "warmup_steps", "patience")


def rule_for(key: str) -> str | None:
    """The rule of a model / task key, from its name."""
    if key in NON_NEGATIVE_COUNTS:
        return "non_negative_int"
    if key.endswith(("dropout", "_drop")) and not key.startswith("locked_"):
        return "probability"  # locked_input_dropout is a switch, not a rate
    if key.endswith(("_size", "_slots")) or key.startswith("num_") or key in ("bptt", "chunk"):
        return "positive_int"
    if key in ("lr", "learning_rate"):
        return "positive_number"
    return None


def _walk(node: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """(full key, last key, value) of every leaf under a config node."""
    if isinstance(node, DictConfig):
        for key in node:
            yield from _walk(node[key], f"{prefix}.{key}")
    elif not isinstance(node, ListConfig):
        yield prefix, prefix.rsplit(".", 1)[-1], node


def check_config(cfg: DictConfig) -> None:
    """Raise `ConfigValueError` for the first value of the wrong type, range or choice."""
    check_switches(cfg)
    check_builtin_callbacks(cfg)
    for section in TARGET_NODES:
        node = OmegaConf.select(cfg, section)
        if isinstance(node, DictConfig):
            check_targets(node, section)


def check_builtin_callbacks(cfg: DictConfig) -> None:
    """Every built-in callback is there with its ``_target_``: the executor holds on to them (the
    last checkpoint to test, the stop on a signal), and the switches that turn two of them off
    are the trainer's ``enable_progress_bar`` and ``enable_checkpointing``."""
    for key in BUILTIN_CALLBACKS:
        node = OmegaConf.select(cfg, f"builtin_callbacks.{key}")
        if not (isinstance(node, DictConfig) and "_target_" in node):
            raise ConfigValueError(
                f"builtin_callbacks.{key} names no callback (a _target_): every run builds it "
                "(conf/builtin_callbacks/default.yaml); drop the override that removed it (the "
                "progress bar and last.ckpt go with trainer.enable_progress_bar=false and "
                "trainer.enable_checkpointing=false)"
            )


def check_switches(cfg: DictConfig) -> None:
    """The checks that need neither torch nor the constructors: the run's switches, the seed and
    the numbers whose rules follow from their names."""
    check_choices(cfg)
    check_seed(cfg.get("seed"))
    check_numbers(cfg)


def warn_doubtful(cfg: DictConfig) -> None:
    """Print `doubtful`'s warnings, one line each (``warning: ...``)."""
    for warning in doubtful(cfg):
        print(f"warning: {warning}", file=sys.stderr, flush=True)


#: the seeds numpy and Lightning's ``seed_everything`` take (an unsigned 32-bit integer)
SEED_RANGE = (0, 2**32 - 1)


def check_seed(seed: Any) -> None:
    low, high = SEED_RANGE
    if not (_is_int(seed) and low <= seed <= high):
        raise ConfigValueError(
            f"seed={seed!r} must be an integer from {low} to {high} (numpy's and Lightning's "
            "seeds are unsigned 32-bit); e.g. seed=1"
        )


def usable_cpus() -> int:
    """The CPUs this process may run on (a SLURM task's or a taskset's, not the node's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def doubtful(cfg: DictConfig) -> list[str]:
    """Settings that run, but not as the user likely meant: more threads than CPUs (they wait for
    each other: a run at about half speed), and a fit with no update to make (``max_epochs=0`` or
    ``max_steps=0``: the test then reads untrained weights)."""
    found = []
    threads, cpus = cfg.get("threads"), usable_cpus()
    if _is_int(threads) and threads > cpus:
        found.append(
            f"threads={threads} is more than the {cpus} CPUs this process may use; threads wait "
            f"for each other then (a run at about half speed): threads={cpus} or threads=null"
        )
    trainer = OmegaConf.select(cfg, "trainer") or {}
    if str(cfg.get("mode")) in ("fit", "fit+test"):
        for key in ("max_epochs", "max_steps"):
            if trainer.get(key) == 0:
                found.append(
                    f"trainer.{key}=0: nothing will be trained"
                    + (", and the test reads the untrained weights" if "test" in cfg.mode else "")
                    + f"; give trainer.{key} a number of {key.removeprefix('max_')} to train"
                )
    return found


def check_command_line(arguments: list[str]) -> str | None:
    """The first override whose value has a character outside ASCII that is not inside quotes
    (Hydra's override grammar reads those only quoted: its lexer error says nothing of that),
    as the message to print; None where there is none."""
    for argument in arguments:
        if argument.startswith("-") or "=" not in argument:
            continue
        key, _, value = argument.partition("=")
        quote = None
        for char in value:
            if quote is None and char in "'\"":
                quote = char
            elif char == quote:
                quote = None
            elif quote is None and not char.isascii():
                return (
                    f"the override {argument} has {char!r}, a character Hydra reads only inside "
                    f"quotes: write it as {key}='\"{value}\"' (single quotes for the shell, "
                    "double quotes for Hydra)"
                )
    return None


def check_override_keys(arguments: list[str], configs: Path) -> str | None:
    """Overrides of keys the config lacks (``tsk=sst``, ``task.module.optimizer.lrr=2``), each
    with the nearest key it has, as the message to print; None where every key exists or the
    command line fails in another way (Hydra reports that itself).

    Hydra's own answer names neither a near key nor the typo: it suggests adding the misspelt key
    (``+tsk=sst``). The check composes the config as Hydra would, a sweep by its first value,
    and drops each override Hydra cannot apply until the rest compose."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    parsed = get_args_parser().parse_args(arguments)
    if parsed.config_name or parsed.config_path or parsed.config_dir:
        return None  # another primary config: Hydra composes and reports it
    try:
        overrides = OverridesParser.create().parse_overrides(parsed.overrides)
    except HydraException:
        return None
    lines = [_first_of_sweep(override) for override in overrides]
    unknown = []
    with initialize_config_dir(config_dir=str(Path(configs).resolve()), version_base="1.3"):
        while True:
            try:
                cfg = compose("config", overrides=lines, return_hydra_config=True)
                break
            except HydraException as error:
                cause = error.__cause__
                key = getattr(cause, "full_key", None)
                failed = [line for line in lines if _overrides(line, key)]
                if not isinstance(cause, (ConfigKeyError, ConfigAttributeError)) or not failed:
                    return None
                unknown.append(failed[0].partition("=")[0])
                lines.remove(failed[0])
    if not unknown:
        return None
    from treernn.invocation import trainer_name

    return (
        "; ".join(_unknown_key_message(key, cfg) for key in unknown)
        + f". A new key is added with a plus (+key=value); {trainer_name()} [overrides] --cfg "
        "job prints the config"
    )


def _overrides(line: str, key: Any) -> bool:
    """Whether the override ``line`` sets ``key`` or a key under it."""
    target = line.partition("=")[0].lstrip("+~")
    return isinstance(key, str) and (target == key or target.startswith(f"{key}."))


def _first_of_sweep(override: Any) -> str:
    """An override as a single run would read it: a sweep by its first value (a sweep that
    cannot be listed, ``interval(...)`` of an Optuna search, by null)."""
    if not override.is_sweep_override():
        return override.input_line
    try:
        first = next(iter(override.sweep_string_iterator()))
    except Exception:  # hydra raises a bare HydraException for sweeps it cannot list
        first = "null"
    return f"{override.get_key_element()}={first}"


def _unknown_key_message(key: str, cfg: DictConfig) -> str:
    parts = key.split(".")
    node, depth = _deepest(cfg, parts)
    near, cutoff = None, 0.75  # 0.75: model.chunk_size of an LSTM is not model.hidden_size
    if isinstance(node, DictConfig):
        close = difflib.get_close_matches(parts[depth], [str(k) for k in node], 1, cutoff)
        guess = [*parts[:depth], *close, *parts[depth + 1 :]]
        near = ".".join(guess) if close and _deepest(cfg, guess)[1] == len(guess) else None
    if near is None:
        # a misspelt or missing key on the way (task.optimizer.lr): a key that ends the same
        same_leaf = [path for path in _paths(cfg, "") if path.rsplit(".", 1)[-1] == parts[-1]]
        close = difflib.get_close_matches(key, same_leaf, 1, cutoff)
        near = close[0] if close else None
    choices = cfg.hydra.runtime.choices
    choice = choices.get(parts[0]) if len(parts) > 1 else None
    where = f"{parts[0]}={choice}" if choice else "the config"
    return f"{key} is not a key of {where}" + (f" (did you mean {near}?)" if near else "")


def _deepest(cfg: DictConfig, parts: list[str]) -> tuple[Any, int]:
    """The deepest node of the dotted key ``parts`` that ``cfg`` has, and how many parts lead to
    it (all of them: the key is there). Nodes are read without resolving: Hydra's interpolations
    need its resolvers."""
    node: Any = cfg
    depth = 0
    while depth < len(parts) and isinstance(node, DictConfig) and parts[depth] in node:
        node, depth = node._get_node(parts[depth]), depth + 1
    return node, depth


def _paths(node: Any, prefix: str) -> Iterator[str]:
    """The dotted key of every node and leaf under a config node."""
    if isinstance(node, DictConfig):
        for key in node:
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            yield from _paths(node._get_node(key), path)


def check_choices(cfg: DictConfig) -> None:
    for key, allowed in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            raise ConfigValueError(_choice_message(key, value, allowed))
    requeue = cfg.get("requeue_signal")
    if requeue is not None:
        name = f"SIG{str(requeue).upper().removeprefix('SIG')}"
        if name not in signal.Signals.__members__:
            raise ConfigValueError(
                f"requeue_signal={requeue!r} is not a signal; use USR1, USR2 or null (no requeue)"
            )


def _choice_message(key: str, value: Any, allowed: tuple[Any, ...]) -> str:
    shown = ", ".join(str(v) for v in allowed)
    close = difflib.get_close_matches(str(value), [str(v) for v in allowed], n=1)
    hint = f"; did you mean {key}={close[0]}?" if close else f"; e.g. {key}={allowed[0]}"
    return f"{key}={value!r} is not one of {shown}{hint}"


def check_targets(node: DictConfig, where: str) -> None:
    """The keys and choices of the constructor ``node._target_`` names, and of nested partials
    (an optimizer, a scheduler)."""
    for key in node:
        child = node[key]
        if isinstance(child, DictConfig) and "_target_" in child:
            check_targets(child, f"{where}.{key}")
    target = node.get("_target_")
    if not isinstance(target, str):
        return
    cls = _import(target)
    if cls is None:
        return  # Hydra's instantiate reports a missing class itself
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    hints = _literal_hints(cls)
    for key in node:
        if str(key).startswith("_") or (where == "model" and key in DESCRIPTIVE_KEYS):
            continue
        if key not in parameters and not takes_any:
            close = difflib.get_close_matches(str(key), list(parameters), n=1)
            hint = f"did you mean {where}.{close[0]}? " if close else ""
            raise ConfigValueError(
                f"{where}.{key} is not a setting of {cls.__name__} ({target}); {hint}remove it "
                f"(~{where}.{key} on the command line) or use one of: "
                f"{', '.join(name for name in parameters if name not in ('self', 'kwargs'))}"
            )
        allowed = hints.get(str(key))
        value = OmegaConf.select(node, str(key), throw_on_missing=False)
        if allowed is not None and value not in allowed:
            raise ConfigValueError(_choice_message(f"{where}.{key}", value, allowed))


def _import(target: str) -> Any:
    module_name, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _literal_hints(cls: Any) -> dict[str, tuple[Any, ...]]:
    """Constructor arguments annotated with ``Literal[...]`` (or ``Literal[...] | None``) and
    their allowed values."""
    function = cls.__init__ if inspect.isclass(cls) else cls
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError, AttributeError):
        return {}
    choices = {}
    for name, hint in hints.items():
        values = _literal_values(hint)
        if values:
            choices[name] = values
    return choices


def _literal_values(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    values: tuple[Any, ...] = ()
    for arg in typing.get_args(hint):
        if arg is type(None):
            values += (None,)
        else:
            inner = _literal_values(arg)
            if not inner:
                return ()  # a free-form alternative (an int, a str): not a list of choices
            values += inner
    return values if any(v is not None for v in values) else ()


def check_numbers(cfg: DictConfig) -> None:
    checks: list[tuple[str, Any, str]] = []
    for section in ("model", "task.module", "task.datamodule"):
        node = OmegaConf.select(cfg, section)
        if node is None:
            continue
        for full_key, key, value in _walk(node, section):
            rule = rule_for(key)
            if rule is not None and value is not None:
                checks.append((full_key, value, rule))
    trainer = OmegaConf.select(cfg, "trainer")
    for key, rule in TRAINER_RULES.items():
        value = trainer.get(key) if trainer is not None else None
        if value is not None:
            checks.append((f"trainer.{key}", value, rule))
    for key, rule in TOP_RULES.items():
        if cfg.get(key) is not None:
            checks.append((key, cfg.get(key), rule))
    for full_key, value, rule in checks:
        description, example, check = RULES[rule]
        example = EXAMPLES.get(full_key, example)
        if not check(value):
            raise ConfigValueError(
                f"{full_key}={value!r} must be {description}; e.g. {full_key}={example}"
            )
