"""The config checks that run before anything is built: choices from ``Literal`` annotations,
keys a constructor does not take, and the run's own switches."""

from __future__ import annotations

from typing import Literal

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.paths import REPO_ROOT
from treernn.config_checks import (
    BUILTIN_CALLBACKS,
    _literal_values,
    check_builtin_callbacks,
    check_targets,
)
from treernn.errors import ConfigValueError


class Cell:
    def __init__(
        self,
        size: int,
        impl: Literal["fast", "reference"] = "fast",
        side: Literal["left", "right"] | None = None,
        width: int | Literal["auto"] = "auto",
    ) -> None:
        pass


def _node(**values):
    return OmegaConf.create({"_target_": f"{__name__}.Cell", **values})


def test_literal_choices_come_from_the_annotations():
    assert _literal_values(Literal["fast", "reference"]) == ("fast", "reference")
    assert _literal_values(Literal["a"] | None) == ("a", None)
    assert _literal_values(int | Literal["auto"]) == ()  # free-form: not a list of choices


def test_a_value_outside_the_choices_names_them_and_the_closest():
    check_targets(_node(size=3, impl="reference", side=None, width=7), "model")
    with pytest.raises(ConfigValueError, match=r"model.impl='fsat' is not one of fast, reference"):
        check_targets(_node(size=3, impl="fsat"), "model")
    with pytest.raises(ConfigValueError, match=r"did you mean model.side=left\?"):
        check_targets(_node(size=3, side="lfet"), "model")


def test_a_key_the_constructor_does_not_take_is_named_with_the_valid_ones():
    with pytest.raises(ConfigValueError, match=r"model.sise is not a setting of Cell .*size\?"):
        check_targets(_node(sise=3), "model")
    check_targets(_node(size=3, name="cell"), "model")  # a model's descriptive name is fine


# ----------------------------------------------------------------------------- built-in callbacks
CONF = REPO_ROOT / "conf"


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["paths.output_dir=/run", *overrides])


@pytest.mark.parametrize("callbacks", ["callbacks=default", "callbacks=none"])
def test_every_run_has_the_built_in_callbacks(callbacks):
    cfg = composed(callbacks)
    check_builtin_callbacks(cfg)
    assert tuple(cfg.builtin_callbacks) == BUILTIN_CALLBACKS
    check_targets(cfg.builtin_callbacks, "builtin_callbacks")
    # the task's monitor, and last.ckpt in the run directory
    built = OmegaConf.to_container(cfg.builtin_callbacks, resolve=True)
    assert built["divergence"] == {
        "_target_": "treernn.callbacks.divergence.DivergenceMonitor",
        "monitor": "val/ppl",
        "mode": "min",
    }
    assert built["last_checkpoint"]["dirpath"] == "/run/checkpoints"


@pytest.mark.parametrize(
    "override", ["~builtin_callbacks.graceful_stop", "builtin_callbacks.divergence=null"]
)
def test_a_built_in_callback_taken_away_is_one_line(override):
    with pytest.raises(ConfigValueError) as error:
        check_builtin_callbacks(composed(override))
    key = override.lstrip("~").split("=")[0]
    assert str(error.value).startswith(f"{key} names no callback (a _target_): every run builds")
    assert "trainer.enable_checkpointing=false" in str(error.value)


def test_a_built_in_callbacks_key_is_checked_against_its_class():
    cfg = composed("+builtin_callbacks.divergence.patiense=3")
    meant = "did you mean builtin_callbacks.divergence.patience"
    with pytest.raises(ConfigValueError, match=meant):
        check_targets(cfg.builtin_callbacks, "builtin_callbacks")
