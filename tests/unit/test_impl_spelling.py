"""One name for the reference/fast switch, ``impl: fast | reference``, for every model (278ea5f).
A checkpoint written before stores the old spelling (Ordered Memory's ``fused``, the tree LSTMs'
``impl: batched``) and still builds the same model; typed on the command line, the old spelling
is the usual one-line error listing what is valid."""

from __future__ import annotations

import hydra
import pytest
import torch
from omegaconf import OmegaConf

from tests.paths import REPO_ROOT
from treernn.checkpoints import constructor_config
from treernn.config_checks import check_targets
from treernn.errors import ConfigValueError

MODELS = REPO_ROOT / "conf" / "model"


def _model_config(name: str, **changes):
    """conf/model/<name>.yaml at a small size, with ``changes`` (None removes a key)."""
    cfg = OmegaConf.to_container(OmegaConf.load(MODELS / f"{name}.yaml"))
    cfg.update(hidden_size=6, dropout=0.0)
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return OmegaConf.create(cfg)


def _build(cfg):
    torch.manual_seed(0)
    return hydra.utils.instantiate(constructor_config(cfg))(input_size=4)


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("ordered_memory", {"impl": None, "fused": True}, "fast"),
        ("ordered_memory", {"impl": None, "fused": False}, "reference"),
        ("td_treelstm", {"impl": "batched"}, "fast"),
        ("ld_treelstm", {"impl": "batched"}, "fast"),
    ],
)
def test_an_old_spelling_builds_the_same_model(name, old, new):
    today = _build(_model_config(name, impl=new))
    stored = _build(_model_config(name, **old))
    assert type(stored) is type(today) and stored.impl == today.impl == new
    assert stored.state_dict().keys() == today.state_dict().keys()
    for key, value in today.state_dict().items():
        torch.testing.assert_close(stored.state_dict()[key], value, atol=0, rtol=0)


def test_an_explicit_impl_wins_over_a_stored_fused_flag():
    # mode=test with model.impl=reference on the command line, over a checkpoint storing fused
    built = _build(_model_config("ordered_memory", impl="reference", fused=True))
    assert built.impl == "reference"


def test_the_same_outputs_from_an_old_ordered_memory_config():
    today = _build(_model_config("ordered_memory")).eval()
    stored = _build(_model_config("ordered_memory", impl=None, fused=True)).eval()
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(stored(x).hidden, today(x).hidden, atol=0, rtol=0)


def test_the_old_spelling_on_the_command_line_is_a_clear_error():
    with pytest.raises(ConfigValueError, match=r"model.fused is not a setting of .*impl"):
        check_targets(_model_config("ordered_memory", fused=True), "model")
    for name in ("td_treelstm", "ld_treelstm"):
        with pytest.raises(
            ConfigValueError, match=r"model.impl='batched' is not one of fast, reference"
        ):
            check_targets(_model_config(name, impl="batched"), "model")
    for name in ("onlstm", "ordered_memory", "td_treelstm", "ld_treelstm"):
        check_targets(_model_config(name), "model")  # today's spelling passes
