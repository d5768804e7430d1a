"""Type and range checks of the numeric config values, before anything is built.

A value of the wrong type would otherwise fail deep inside a constructor (``model.num_layers=2.5``:
``can't multiply sequence by non-int``) or after minutes of data loading. The rules go by key name,
so they cover every model and task: sizes and counts are positive integers, dropouts are
probabilities, learning rates are positive, and the trainer's counters are integers. Each failure
names the key, the value and a valid example.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from treernn.errors import ConfigValueError

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
    """Raise :class:`ConfigValueError` for the first value of the wrong type or range."""
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
    for full_key, value, rule in checks:
        description, example, check = RULES[rule]
        if not check(value):
            raise ConfigValueError(
                f"{full_key}={value!r} must be {description}; e.g. {full_key}={example}"
            )
