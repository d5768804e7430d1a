"""Run the real CLI: in-process (Hydra compose, same code path as train.py) or as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Callback
from omegaconf import open_dict

from tests.paths import REPO_ROOT
from treernn.lifecycle import entry
from treernn.lifecycle.resolvers import register_resolvers

CONF_DIR = str(REPO_ROOT / "conf")

#: the worked example of CONTRIBUTING "Adding a model" (a GRU: tests/fixtures/example_model/gru.py
#: and conf/model/example_gru.yaml there), on Hydra's search path beside conf/
EXAMPLE_CONF = REPO_ROOT / "tests" / "fixtures" / "example_model" / "conf"
WITH_EXAMPLE = [f"hydra.searchpath=[file://{EXAMPLE_CONF}]"]


def model_configs() -> list[str]:
    """Every model config: conf/model/*.yaml (whatever a contributor added) and the example's."""
    found = [
        *(REPO_ROOT / "conf" / "model").glob("*.yaml"),
        *(EXAMPLE_CONF / "model").glob("*.yaml"),
    ]
    return sorted(path.stem for path in found)


#: a tiny PTB-sized setting so that a run takes seconds
TINY_LM = [
    "model.hidden_size=40",
    "model.num_layers=2",
    "task.module.embedding_size=20",
    "task.datamodule.train_fraction=0.01",
]


def tiny_logic(validate_every: int, max_steps: int | None = None) -> list[str]:
    """A tiny logic classifier trained by updates and validated every ``validate_every`` of them
    (as the tables run), its budget ``max_steps`` (None: set by the caller)."""
    budget = [] if max_steps is None else [f"trainer.max_steps={max_steps}"]
    return [
        "task=logic",
        "model=lstm",
        "model.hidden_size=16",
        "task.module.embedding_size=16",
        "task.datamodule.train_limit=2000",
        "trainer.max_epochs=-1",
        *budget,
        f"trainer.val_check_interval={validate_every}",
        "trainer.check_val_every_n_epoch=null",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
    ]


#: ON-LSTM on PTB parses the treebank sample at each validation: keep it short in tests
TINY_PARSE = ["task.callbacks.parse_f1.max_sentences=40"]


def compose_config(overrides: list[str], output_dir: Path):
    """The composed config of ``python train.py <overrides>``, with its run directory set."""
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    # as under train.py: ${hydra:...} resolves (a model's default name is its config's choice)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.log_dir = str(output_dir.parent)
    return cfg


def train_in_process(overrides: list[str], output_dir: Path) -> dict[str, float]:
    return entry.train(compose_config(overrides, output_dir))


def run_cli(
    args: list[str], cwd: Path = REPO_ROOT, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python train.py <args>`` as a user would type it; outputs go to the caller's log_dir.
    ``env``: variables added to this process's environment."""
    env = {**os.environ, **(env or {})}
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class SendSignalAt(Callback):
    """Sends ``signal_name`` to this process once, at the end of training step ``step``: a
    preemption notice (SLURM's ``--signal``) at a known point, for the requeue test."""

    def __init__(self, step: int, signal_name: str = "SIGUSR2") -> None:
        self.step = step
        self.signal = signal.Signals[signal_name]

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signal)


def fake_slurm_env(bin_dir: Path, job_id: str = "4242") -> dict[str, str]:
    """The environment of one SLURM task (srun, one task), with an ``scontrol`` on the PATH that
    records the requeue request in ``bin_dir/requeued`` instead of asking a scheduler."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> "{bin_dir / "requeued"}"\n')
    scontrol.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NAME": "treernn-test",
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
    }


def run_torchrun(
    args: list[str], nproc: int = 2, cwd: Path = REPO_ROOT, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=<nproc> train.py <args>``."""
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            str(REPO_ROOT / "train.py"),
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class FillDiskAt(Callback):
    """Fills the filesystem of ``path`` at the end of training step ``step``, leaving ``leave``
    bytes: a disk that runs full while a run trains (for the full-disk test on a small tmpfs)."""

    def __init__(self, step: int, path: str, leave: int = 16384) -> None:
        self.step = step
        self.path = Path(path)
        self.leave = leave

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step != self.step:
            return
        stats = os.statvfs(self.path.parent)
        free = stats.f_bavail * stats.f_frsize - self.leave
        with open(self.path, "wb") as handle:
            handle.write(b"\0" * max(0, free))


def treernn_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m treernn <args>`` as a user would type it."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "treernn", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The single ``error: ...`` line of a failed command, which holds every needle; no
    traceback was printed."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
