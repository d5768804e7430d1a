"""The config checks that run before anything is built: choices from ``Literal`` annotations,
keys a constructor does not take, and the run's own switches."""

from __future__ import annotations

from typing import Literal

import pytest
from omegaconf import OmegaConf

from treernn.config_checks import _literal_values, check_targets
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
