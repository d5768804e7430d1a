"""Train and evaluate a treernn model: ``python train.py task=ptb model=onlstm [overrides]``."""

import hydra
from omegaconf import DictConfig

from treernn import run

run.register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    return run.main(cfg)  # the monitored metric for an Optuna sweep (conf/hparams_search/)


if __name__ == "__main__":
    main()
