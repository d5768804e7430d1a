"""``treernn-train``: the Hydra training entry of an installed treernn, the same program as
``python train.py`` in a clone (same config tree, overrides, ``-m`` multiruns), runnable from any
directory: run directories go under ``./outputs`` of the working directory and data is read from
``TREERNN_DATA_DIR`` (default ``./data``).

The configs are the package's ``treernn/conf`` (a wheel carries a copy of the repository's
``conf/``, made when the wheel is built: ``setup.py``) or, in a checkout where the package is not
built, the repository's ``conf/`` itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from treernn.extras import MissingExtraError, require
from treernn.invocation import trainer_name

if TYPE_CHECKING:
    from omegaconf import DictConfig

PACKAGED_CONFIGS = Path(__file__).resolve().parent / "conf"
CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "conf"


def config_dir() -> Path:
    """Where ``treernn-train`` reads its configs (module docstring)."""
    return PACKAGED_CONFIGS if PACKAGED_CONFIGS.is_dir() else CHECKOUT_CONFIGS


def require_training() -> None:
    """Without the ``train`` extra (Hydra, OmegaConf), one line that says what to install and
    exit status 1: an inference install (``pip install treernn``) has neither."""
    try:
        for module in ("hydra", "omegaconf"):
            require(module, f"training ({trainer_name()})")
    except MissingExtraError as error:
        sys.exit(f"error: {error}")


def train(cfg: DictConfig):
    """The run of a composed config (``train.py``'s too): the checks that need no torch, then
    `treernn.lifecycle.entry.main`; returns the monitored metric for an Optuna sweep."""
    from treernn.lifecycle.runs import check_before_loading

    check_before_loading(cfg)  # a wrong switch or number, answered before torch loads
    from treernn.lifecycle import entry

    return entry.main(cfg)


def check_arguments(configs: Path | None = None) -> None:
    """What Hydra would answer without saying how to fix it (an unquoted character outside
    ASCII, a misspelt key) against the config tree ``configs`` (default `config_dir`): one line
    and exit status 1."""
    from treernn.config_checks import check_command_line, check_override_keys

    problem = check_command_line(sys.argv[1:]) or check_override_keys(
        sys.argv[1:], configs or config_dir()
    )
    if problem:
        sys.exit(f"error: {problem}")


def main() -> None:
    """The console script: Hydra parses the command line and calls `train`."""
    require_training()
    check_arguments()
    import hydra

    from treernn.lifecycle.resolvers import register_resolvers

    register_resolvers()
    hydra_main = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
    hydra_main(train)()


if __name__ == "__main__":
    main()
