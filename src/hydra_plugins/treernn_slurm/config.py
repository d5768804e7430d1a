"""The settings of ``hydra/launcher=slurm``: submitit's SLURM settings and this launcher's own.

No ``from __future__ import annotations`` here: Hydra's plugin scan runs this module without
entering it in ``sys.modules``, where a dataclass looks string annotations up.
"""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

try:  # the cluster extra: pip install -e ".[cluster]"
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
except ImportError:  # without it there is no SLURM launcher to configure
    SlurmQueueConf = None

if SlurmQueueConf is not None:

    @dataclass
    class TreernnSlurmConf(SlurmQueueConf):
        _target_: str = "hydra_plugins.treernn_slurm.slurm_launcher.SlurmLauncher"
        #: seconds between two looks at the jobs (``scontrol``, result files); a job seen ended
        #: without a result is reported after ``GRACE_POLLS`` more looks
        poll_s: float = 10.0

    ConfigStore.instance().store(
        group="hydra/launcher", name="treernn_slurm", node=TreernnSlurmConf(), provider="treernn"
    )
