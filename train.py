"""Train and evaluate a treernn model: ``python train.py task=ptb model=onlstm [overrides]``.

The same program as the ``treernn-train`` console script of an installed treernn
(`treernn.train_entry`), reading ``conf/`` beside this file.
"""

from pathlib import Path

from treernn.train_entry import check_arguments, require_training, train

require_training()  # an install without the train extra: one line that says what to install

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from treernn.lifecycle.resolvers import register_resolvers  # noqa: E402

# Only what Hydra needs to compose the config is imported up front: a wrong choice or key is
# answered before torch and Lightning load (several seconds); the run imports them.
register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    return train(cfg)  # the monitored metric for an Optuna sweep (conf/hparams_search/)


if __name__ == "__main__":
    check_arguments(Path(__file__).resolve().parent / "conf")
    main()
