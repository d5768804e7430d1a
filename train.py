"""Train and evaluate a treernn model: ``python train.py task=ptb model=onlstm [overrides]``."""

import sys

import hydra
from omegaconf import DictConfig

from treernn.config_checks import check_command_line
from treernn.resolvers import register_resolvers
from treernn.runs import check_before_loading

# Only what Hydra needs to compose the config is imported up front: a wrong choice or key is
# answered before torch and Lightning load (several seconds); the run imports them.
register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    check_before_loading(cfg)  # a wrong switch or number, answered before torch loads
    from treernn import run

    return run.main(cfg)  # the monitored metric for an Optuna sweep (conf/hparams_search/)


if __name__ == "__main__":
    problem = check_command_line(sys.argv[1:])  # Hydra's lexer error would not say how to fix it
    if problem:
        sys.exit(f"error: {problem}")
    main()
