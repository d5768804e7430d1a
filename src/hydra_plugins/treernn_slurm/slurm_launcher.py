"""Hydra's submitit SLURM launcher, made to never wait forever (``hydra/launcher=slurm``).

The plugin waits for each job's result file, and asks ``sacct`` whether a job has ended. Without
SLURM accounting (a small cluster, the local one of the tests) ``sacct`` fails, and a job that ends
without writing a result (``scancel``, a node failure, a job stopped by a signal) leaves the
submitting command waiting for ever; a job that can never start (it asks for more CPUs than the
partition's nodes have) waits silently in the queue. This launcher submits the jobs the same way and
then watches them with ``scontrol``, which needs no accounting:

- a job that ended without a result is reported (its ``status.json`` says ``interrupted`` or
  ``failed``) and the sweep goes on to its summary, which says how to resume it;
- a job pending for a reason that will not change (``PartitionConfig``: more CPUs, memory or
  nodes than the partition has) is cancelled with one line naming the reason and the setting;
- a requeued job (preemption, the time-limit signal) is waited for: it runs again.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

try:  # the cluster extra: pip install -e ".[cluster]"
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
        SlurmLauncher as SubmititSlurmLauncher,
    )
except ImportError:  # without it this module defines no launcher (Hydra imports it anyway)
    SubmititSlurmLauncher = None

log = logging.getLogger("treernn")

#: states of a job that will not run again (a requeued job is PENDING, then RUNNING)
ENDED = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}
#: reasons a pending job will never start as asked
NEVER_STARTS = {
    "PartitionConfig": "it asks for more CPUs, memory, GPUs or nodes than the partition has",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "BadConstraints": "no node has the features it asks for",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
}
#: polls that a job may be seen ended before its result file shows up (a shared filesystem's delay)
GRACE_POLLS = 2


def slurm_state(job_id: str) -> tuple[str, str, str] | None:
    """(JobState, Reason, ExitCode) of a job from ``scontrol``, or None if SLURM no longer knows
    it."""
    try:
        result = subprocess.run(
            ["scontrol", "show", "job", "-o", str(job_id)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    fields = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)
    return (
        fields.get("JobState", "UNKNOWN"),
        fields.get("Reason", "None"),
        fields.get("ExitCode", "0:0"),
    )


if SubmititSlurmLauncher is None:
    SubmititSlurmLauncher = object  # noqa: N816 - so that the module still imports


class SlurmLauncher(SubmititSlurmLauncher):
    #: seconds between two looks at the jobs (``hydra.launcher.poll_s``)
    poll_s: float = 10.0

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """The job's side: before the run sets itself up, a requeue signal (which SLURM may send
        up to a minute early) is remembered instead of ending the process."""
        from treernn.lifecycle.signals import remember_requeue, signal_number

        signum = signal_number(self.config.get("requeue_signal") if self.config else None)
        if signum is not None:
            signal.signal(signum, remember_requeue)
        return super().__call__(*args, **kwargs)

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        import submitit

        assert self.config is not None
        params = dict(self.params)
        self.poll_s = float(params.pop("poll_s", self.poll_s))
        executor = submitit.AutoExecutor(
            folder=params.pop("submitit_folder"),
            cluster="slurm",
            slurm_max_num_timeout=params.pop("max_num_timeout", 0),
        )
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{key if key in shared else f"slurm_{key}": value for key, value in params.items()}
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        arguments = []
        for offset, overrides in enumerate(job_overrides):
            number = initial_job_idx + offset
            log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
            arguments.append(
                (list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", _singletons())
            )
        jobs = executor.map_array(self, *zip(*arguments, strict=True))
        return self._wait(jobs, [list(o) for o in job_overrides], initial_job_idx)

    def _wait(self, jobs: list[Any], overrides: list[list[str]], first: int) -> list[JobReturn]:
        results: dict[int, JobReturn] = {}
        ended_polls: dict[int, int] = {}
        while len(results) < len(jobs):
            for index, job in enumerate(jobs):
                if index in results:
                    continue
                if job.done():
                    results[index] = job.results()[0]
                    continue
                state = slurm_state(job.job_id)
                job_dir = self._job_dir(first + index)
                if state is not None and state[0] == "PENDING" and state[1] in NEVER_STARTS:
                    results[index] = self._never_starts(job, state[1], overrides[index], job_dir)
                elif state is None or state[0].split()[0] in ENDED:
                    ended_polls[index] = ended_polls.get(index, 0) + 1
                    if ended_polls[index] <= GRACE_POLLS:
                        continue
                    if state is not None and self._killed_by_requeue_signal(state[2]):
                        # the signal came before the job could catch it (startup): requeue it
                        self._requeue(job, job_dir)
                        ended_polls.pop(index)
                        continue
                    what = state[0] if state else "no longer known to SLURM"
                    results[index] = self._gone(job, what, overrides[index], job_dir)
            if len(results) < len(jobs):
                time.sleep(self.poll_s)
        return [results[index] for index in range(len(jobs))]

    def _killed_by_requeue_signal(self, exit_code: str) -> bool:
        from treernn.lifecycle.signals import signal_number

        signum = signal_number(self.config.get("requeue_signal"))
        status = exit_code.split(":")[0]
        return signum is not None and status.isdigit() and int(status) == 128 + signum

    def _requeue(self, job: Any, job_dir: Path) -> None:
        from treernn.lifecycle import records
        from treernn.lifecycle.records import RunState

        result = subprocess.run(
            ["scontrol", "requeue", str(job.job_id)], capture_output=True, text=True, check=False
        )
        print(
            f"SLURM job {job.job_id} was ended by the requeue signal while it started; "
            + ("requeued" if result.returncode == 0 else f"requeue failed: {result.stderr}"),
            file=sys.stderr,
            flush=True,
        )
        if (
            result.returncode == 0
            and records.read_status(job_dir).get("status") == RunState.RUNNING
        ):
            records.write_status(job_dir, status=RunState.REQUEUED, error=None)

    def _job_dir(self, number: int) -> Path:
        return Path(str(self.config.hydra.sweep.dir)) / str(number)

    def _never_starts(self, job: Any, reason: str, overrides: list[str], job_dir: Path):
        # imported where used: Hydra imports every plugin module whenever it scans for plugins
        from treernn.lifecycle import records
        from treernn.lifecycle.records import RunState

        subprocess.run(["scancel", str(job.job_id)], capture_output=True, check=False)
        message = (
            f"SLURM job {job.job_id} cannot start (Reason={reason}): {NEVER_STARTS[reason]} "
            f"(hydra.launcher.cpus_per_task={self.params.get('cpus_per_task')}, "
            f"tasks_per_node={self.params.get('tasks_per_node')}, "
            f"nodes={self.params.get('nodes')}, mem_gb={self.params.get('mem_gb')}); cancelled. "
            "Ask for less (e.g. hydra.launcher.cpus_per_task=1), or another partition"
        )
        print(f"error: {message}", file=sys.stderr, flush=True)
        records.write_status(job_dir, status=RunState.FAILED, stage="setup", error=message)
        return self._stand_in(overrides, job_dir)

    def _gone(self, job: Any, state: str, overrides: list[str], job_dir: Path) -> JobReturn:
        # imported where used: Hydra imports every plugin module whenever it scans for plugins
        from treernn.lifecycle import records
        from treernn.lifecycle.records import RunState

        record = records.read_status(job_dir)
        if record.get("status") in (None, RunState.RUNNING, RunState.REQUEUED):
            # it ended without saying so itself (SIGKILL, a node failure): its checkpoints stay
            records.write_status(
                job_dir,
                status=RunState.INTERRUPTED,
                error=f"SLURM job {job.job_id} ended ({state}) without finishing",
            )
        print(
            f"SLURM job {job.job_id} ({job_dir}) ended ({state}) without a result: "
            f"{records.read_status(job_dir).get('status')}",
            file=sys.stderr,
            flush=True,
        )
        return self._stand_in(overrides, job_dir)

    @staticmethod
    def _stand_in(overrides: list[str], job_dir: Path) -> JobReturn:
        """What the job would have returned had it failed inside (the run entry,
        treernn.lifecycle.entry.main, returns None: the sweep goes on, and its summary lists the
        job)."""
        return JobReturn(
            overrides=overrides,
            working_dir=str(job_dir),
            status=JobStatus.COMPLETED,
            _return_value=None,
        )


def _singletons() -> Any:
    from hydra.core.singleton import Singleton

    return Singleton.get_state()
