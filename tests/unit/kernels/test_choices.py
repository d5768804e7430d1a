"""The kernels' choices as part of a run (treernn.kernels.choices): recorded with the run, used
again when it resumes and by a sweep's later jobs, kept per machine whatever the load, probed
within a time budget, and the same for two processes that ask at once."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from treernn import kernels
from treernn.errors import ConfigValueError
from treernn.kernels import choices, cpp_ext, gemm

CPU = torch.device("cpu")
NAME = "Some CPU | 20x400x1640 float32 | 2 threads | torch 2.13.0"
USABLE = ["mkl", "onednn", "aten"]


@pytest.fixture(autouse=True)
def machine(tmp_path, monkeypatch) -> Path:
    """A machine cache of the test's own, no run attached, nothing remembered in the process
    (the compiled kernels loaded first from the test run's own cache: built again, minutes)."""
    for source in sorted(cpp_ext.SOURCE_DIR.glob("*.cpp")):
        cpp_ext.load_extension(source.stem)
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(choices.BUDGET_ENV, raising=False)
    monkeypatch.setattr(gemm, "_CHOICES", {})
    choices.detach()
    yield tmp_path / "cache" / "gemm_backends.json"
    choices.detach()


def _choose(probe=None, default="aten", busy=lambda: None, name=NAME) -> str:
    """``busy()``: what `gemm.machine_busy` would find, whatever the sample it is given."""
    return choices.choose(name, USABLE, probe or (lambda: "mkl"), default, 8, lambda since: busy())


def _never() -> str:
    pytest.fail("probed again")


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / ".hydra" / "kernel_choices.json").read_text())


def test_a_run_records_its_choices_and_uses_them_when_it_resumes(tmp_path, machine) -> None:
    """The run's record names the choice and how it was made; resumed (a new process: attached
    again), the run uses its record even where the machine's cache now says otherwise."""
    run_dir = tmp_path / "run"
    choices.attach(run_dir)
    assert _choose(lambda: "mkl") == "mkl"
    named = f"{NAME} | of mkl onednn aten"
    record = _record(run_dir)
    assert record["choices"] == {named: "mkl"} and record["how"] == {named: "probed"}
    assert choices.used() == {named: ("mkl", "probed")}
    # the machine's cache keeps it under the probes' revision: probed again after a new probe
    stored = json.loads(machine.read_text())
    assert stored == {f"{NAME} | probes 8 | of mkl onednn aten": "mkl"}
    # the machine probed again since (its cache deleted, another load): onednn
    machine.write_text(json.dumps({f"{NAME} | probes 8 | of mkl onednn aten": "onednn"}))
    choices.attach(run_dir)
    assert _choose(_never) == "mkl"
    # another run on this machine takes the machine's choice
    choices.attach(tmp_path / "another")
    assert _choose(_never) == "onednn"


def test_attaching_forgets_what_the_process_chose_before(tmp_path) -> None:
    """A process that trained one run and then resumes another (tests, notebooks) takes the
    resumed run's record over the choices it remembers."""
    gemm._CHOICES[("anything",)] = "mkl"
    choices.attach(tmp_path / "run")
    assert gemm._CHOICES == {}


def test_the_jobs_of_a_sweep_share_its_choices(tmp_path, machine) -> None:
    """The first job to need a shape decides it for the sweep: a later job (here on a machine
    whose cache lost it) uses the sweep's record, and records it in its own directory too."""
    sweep = tmp_path / "sweep"
    choices.attach(sweep / "0", sweep)
    assert _choose(lambda: "onednn") == "onednn"
    machine.unlink()
    choices.attach(sweep / "1", sweep)
    assert _choose(_never) == "onednn"
    named = f"{NAME} | of mkl onednn aten"
    assert _record(sweep / "1")["choices"] == {named: "onednn"}
    assert json.loads((sweep / "kernel_choices.json").read_text())["choices"] == {named: "onednn"}


def test_a_record_is_never_changed_only_added_to(tmp_path) -> None:
    """A job resumed with a record of its own that differs from the sweep's keeps its own and
    leaves the sweep's as it was."""
    sweep = tmp_path / "sweep"
    choices.attach(sweep / "0", sweep)
    _choose(lambda: "onednn")
    choices.machine_file().unlink()
    choices.attach(sweep / "1")
    assert _choose(lambda: "aten") == "aten"  # recorded by job 1 outside the sweep
    choices.attach(sweep / "1", sweep)
    assert _choose(_never) == "aten"
    named = f"{NAME} | of mkl onednn aten"
    assert json.loads((sweep / "kernel_choices.json").read_text())["choices"][named] == "onednn"


def test_mode_test_reads_the_trained_run_and_leaves_it_alone(tmp_path, machine) -> None:
    trained = tmp_path / "trained"
    choices.attach(trained)
    assert _choose(lambda: "aten") == "aten"
    before = (trained / ".hydra" / "kernel_choices.json").read_text()
    machine.unlink()
    choices.attach(tmp_path / "test-run", trained_in=trained)
    assert _choose(_never) == "aten"
    assert (trained / ".hydra" / "kernel_choices.json").read_text() == before


def test_other_ranks_read_the_record_and_write_nothing(tmp_path, machine) -> None:
    run_dir = tmp_path / "run"
    choices.attach(run_dir, write=False)
    assert _choose(lambda: "onednn") == "onednn"
    assert not (run_dir / ".hydra").exists()
    assert json.loads(machine.read_text())  # the machine's cache is shared with rank zero


def test_a_probe_under_load_is_kept_and_recorded_as_such(tmp_path, machine) -> None:
    choices.attach(tmp_path / "run")
    busy = lambda: "load average 6.0 on 2 CPUs during the probe"  # noqa: E731
    assert _choose(lambda: "onednn", busy=busy) == "onednn"
    stored = json.loads(machine.read_text())
    machine_name = f"{NAME} | probes 8 | of mkl onednn aten"
    assert stored[machine_name] == "onednn"
    assert stored["taken under load"] == {machine_name: busy()}
    (how,) = _record(tmp_path / "run")["how"].values()
    assert how == f"probed under load ({busy()})"


def test_a_choice_probed_under_load_is_probed_again_once_the_machine_is_idle(
    tmp_path, machine
) -> None:
    """Kept under load, a choice is used while the machine stays busy, probed again by the first
    run that finds it idle (the note goes), and then kept like any other; a run's record of the
    old choice still wins for that run, so its resume is exact."""
    busy = lambda: "load average 6.0 on 2 CPUs during the probe"  # noqa: E731
    machine_name = f"{NAME} | probes 8 | of mkl onednn aten"
    choices.attach(tmp_path / "loaded")
    assert _choose(lambda: "onednn", busy=busy) == "onednn"
    choices.attach(tmp_path / "still-busy")
    assert _choose(_never, busy=busy) == "onednn"
    choices.attach(tmp_path / "idle")
    assert _choose(lambda: "mkl") == "mkl"
    stored = json.loads(machine.read_text())
    assert stored[machine_name] == "mkl" and "taken under load" not in stored
    (how,) = _record(tmp_path / "idle")["how"].values()
    assert how == "probed"
    choices.attach(tmp_path / "next")
    assert _choose(_never) == "mkl"
    choices.attach(tmp_path / "loaded")  # its resume
    assert _choose(_never) == "onednn"


def test_a_choice_probed_under_load_beats_a_default_when_no_probe_fits(
    tmp_path, machine, monkeypatch
) -> None:
    busy = lambda: "load average 6.0 on 2 CPUs during the probe"  # noqa: E731
    assert _choose(lambda: "onednn", busy=busy) == "onednn"
    monkeypatch.setenv(choices.BUDGET_ENV, "0")
    choices.attach(tmp_path / "run")
    assert _choose(_never, default="aten") == "onednn"
    (how,) = _record(tmp_path / "run")["how"].values()
    assert how.endswith("gemm_backends.json, probed under load")


def test_no_budget_no_probe_the_default_for_this_run_only(tmp_path, machine, monkeypatch) -> None:
    """TREERNN_PROBE_SECONDS=0: the kernel's default, recorded with the run (a resume uses it
    again) but not kept for the machine, whose next run with a budget probes the shape."""
    monkeypatch.setenv(choices.BUDGET_ENV, "0")
    choices.attach(tmp_path / "run")
    assert _choose(_never, default="aten") == "aten"
    assert not machine.exists()
    (how,) = _record(tmp_path / "run")["how"].values()
    assert how == "default: the run's probing budget was spent"
    monkeypatch.delenv(choices.BUDGET_ENV)
    choices.attach(tmp_path / "run")
    assert _choose(_never) == "aten"
    choices.attach(tmp_path / "next")
    assert _choose(lambda: "mkl") == "mkl"


def test_a_run_stops_probing_when_its_budget_is_spent(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(choices.BUDGET_ENV, "0.3")
    choices.attach(tmp_path / "run")

    def slow() -> str:
        time.sleep(0.2)
        return "mkl"

    chosen = [_choose(slow, name=f"{NAME} {shape}") for shape in range(4)]
    assert chosen == ["mkl", "mkl", "aten", "aten"]


@pytest.mark.parametrize("value", ["fast", "-1", "nan"])
def test_a_bad_budget_is_one_line(value, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(choices.BUDGET_ENV, value)
    choices.attach(tmp_path / "run")
    with pytest.raises(ConfigValueError, match=f"TREERNN_PROBE_SECONDS='{value}': the seconds"):
        _choose()


def test_a_probe_ends_by_its_deadline_and_the_run_takes_the_default(tmp_path, machine) -> None:
    """Products too slow for the probe's second: the timing stops after the first product's
    calls, the others untimed; the run takes the default (a choice among the candidates timed
    would be a choice of the first), the machine keeps nothing."""
    called = []

    def product(name: str):
        return lambda: called.append(name) or time.sleep(0.6)

    products = {name: product(name) for name in ("mkl", "onednn", "aten")}

    def probe() -> str:
        seconds = gemm.time_in_turns(products, 1e9)
        return min(seconds, key=seconds.get)

    choices.attach(tmp_path / "run")
    start = time.perf_counter()
    assert _choose(probe, default="aten") == "aten"
    assert time.perf_counter() - start < choices.PROBE_BUDGET + 0.6 + 0.5
    assert called == ["mkl", "mkl"]  # set-up, first call, no time for the others
    assert not machine.exists()
    (how,) = _record(tmp_path / "run")["how"].values()
    assert how == "default: its probe ran out of time"


def test_real_probes_of_many_shapes_cost_a_run_its_budget_at_most(tmp_path, monkeypatch) -> None:
    """The real GEMM probes of sixty shapes, each of which takes milliseconds a product: the run
    spends about its budget probing, whatever the machine's load, and takes the default after.
    (Twenty shapes under a budget of 1.5 s, as this test had it, took 1.4 s on an Intel Xeon with
    AMX, so no shape was left to take the default.)"""
    monkeypatch.setenv(choices.BUDGET_ENV, "0.5")
    choices.attach(tmp_path / "run")
    start = time.perf_counter()
    chosen = [gemm.resolve("auto", 256, 512, 1024 + 16 * i, CPU, torch.float32) for i in range(60)]
    assert time.perf_counter() - start < 0.5 + choices.PROBE_BUDGET + 0.5
    how = _record(tmp_path / "run")["how"].values()
    assert any(text.startswith("default") for text in how)
    assert chosen[-1] == "aten"


def test_two_processes_asking_at_once_make_one_choice(tmp_path) -> None:
    """Two processes that need the same shape at once: one probes, the other waits for its
    choice (here their probes would disagree: each returns its own favourite)."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from treernn.kernels import choices
        favourite = sys.argv[1]
        def probe():
            time.sleep(0.5)
            return favourite
        print(choices.choose({NAME!r}, ["mkl", "onednn"], probe, "mkl", 8))
        """
    )
    env = {**os.environ, "TREERNN_CACHE_DIR": str(tmp_path / "cache")}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, favourite], env=env, stdout=subprocess.PIPE, text=True
        )
        for favourite in ("mkl", "onednn")
    ]
    outputs = {process.communicate(timeout=120)[0].strip() for process in processes}
    assert len(outputs) == 1, outputs


def test_a_resume_under_other_switches_is_said(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.delenv("TREERNN_GEMM_BACKEND", raising=False)
    choices.attach(tmp_path / "run")
    assert _record(tmp_path / "run")["switches"]["TREERNN_GEMM_BACKEND"] is None
    monkeypatch.setenv("TREERNN_GEMM_BACKEND", "aten")
    with caplog.at_level(logging.WARNING, logger=choices.__name__):
        choices.attach(tmp_path / "run")
    (message,) = [record.getMessage() for record in caplog.records]
    assert "TREERNN_GEMM_BACKEND=None then, 'aten' now" in message
    assert "last digits" in message


@pytest.mark.parametrize(("budget", "per_probe"), [("5", 1.0), ("2", 1.0), ("600", 120.0)])
def test_a_probe_gets_a_second_or_a_fifth_of_a_larger_budget(
    budget, per_probe, tmp_path, monkeypatch
) -> None:
    """TREERNN_PROBE_SECONDS=600 (filling a machine's cache in one run) gives a large shape's
    probe two minutes; the default 5 s gives a probe one."""
    monkeypatch.setenv(choices.BUDGET_ENV, budget)
    choices.attach(tmp_path / "run")
    seen = []

    def probe() -> str:
        seen.append(choices.probe_deadline() - time.perf_counter())
        return "mkl"

    _choose(probe)
    assert per_probe - 0.2 < seen[0] <= per_probe


@pytest.mark.parametrize(("budget", "left_after"), [("5", 1.0), ("1.2", 0.5), (None, 1.0)])
def test_a_probe_gets_back_the_time_of_the_probes_it_asks_for(
    budget, left_after, tmp_path, monkeypatch
) -> None:
    """A precision probe whose first products probe their GEMM backends (0.7 s here): its
    second is counted from where they ended, within the run's budget (1.2 s: 0.5 s left), and
    without a run (None) within its own second alone. Before, the backends' probes ate the
    precision probe's second and its bf16 run never ran on a machine's first process."""
    if budget is not None:
        monkeypatch.setenv(choices.BUDGET_ENV, budget)
        choices.attach(tmp_path / "run")
    seen = []

    def asked() -> str:
        time.sleep(0.7)
        return "onednn"

    def probe() -> str:
        assert _choose(asked, name=f"{NAME} asked") == "onednn"
        seen.append(choices.probe_deadline() - time.perf_counter())
        return "mkl"

    assert _choose(probe) == "mkl"
    assert left_after - 0.15 < seen[0] <= left_after


@pytest.mark.parametrize(
    ("updates", "budget"), [(None, 5.0), (100, 5.0), (3000, 30.0), (10**6, 60.0), (math.inf, 60.0)]
)
def test_a_long_fit_may_probe_longer(updates, budget, tmp_path, monkeypatch) -> None:
    """5 s for a short run; a hundredth of a second per planned update for a long fit, up to a
    minute (the paper-size ON-LSTM's first bf16-mixed run probed 8 of its 32 choices in 5 s and
    took the defaults, fp32 among them, for the rest of its run); TREERNN_PROBE_SECONDS wins;
    a new run starts from 5 s again."""
    choices.attach(tmp_path / "run")
    if updates is not None:
        kernels.context.plan_updates(updates)
    assert choices.run_budget() == pytest.approx(budget)
    monkeypatch.setenv(choices.BUDGET_ENV, "2")
    assert choices.run_budget() == 2.0
    monkeypatch.delenv(choices.BUDGET_ENV)
    choices.attach(tmp_path / "next")
    assert choices.run_budget() == choices.RUN_BUDGET


def test_the_lifecycle_says_how_many_updates_the_fit_plans(tmp_path) -> None:
    """As the fit starts, before its sanity check: Lightning's estimate of its updates."""
    from types import SimpleNamespace

    from treernn.lifecycle.kernel_context import PlannedUpdates

    choices.attach(tmp_path / "run")
    PlannedUpdates().on_fit_start(SimpleNamespace(estimated_stepping_batches=2500), None)
    assert choices.run_budget() == pytest.approx(25.0)
