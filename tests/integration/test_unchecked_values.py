"""Values that reached a library's own traceback (or ran without a word) are answered before torch
loads: the seed's type and range, the joblib launcher's job count, a path with a character
outside ASCII, a key the config lacks; more threads than CPUs and a fit with nothing to train are
warned about. None of them leaves a run or sweep directory behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.integration.helpers import CONF_DIR, run_cli
from treernn.config_checks import (
    check_command_line,
    check_override_keys,
    doubtful,
    usable_cpus,
)

CONF = Path(CONF_DIR)


def _no_directory_left(log_dir) -> None:
    assert not log_dir.exists() or not any(log_dir.rglob("*")), sorted(log_dir.rglob("*"))


@pytest.mark.parametrize(
    ("seed", "shown"), [("-1", "-1"), ("abc", "'abc'"), ("4294967296", "4294967296")]
)
def test_a_seed_outside_numpys_range_is_one_line_before_torch_loads(tmp_path, seed, shown):
    started = time.monotonic()
    done = run_cli(["task=logic", "model=lstm", f"seed={seed}", f"paths.log_dir={tmp_path}/o"])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip() == (
        f"error: seed={shown} must be an integer from 0 to 4294967295 (numpy's and Lightning's "
        "seeds are unsigned 32-bit); e.g. seed=1"
    )
    assert time.monotonic() - started < 10  # torch and Lightning never loaded (14 s before)
    _no_directory_left(tmp_path / "o")


def test_a_launcher_with_no_workers_is_one_line_and_makes_no_sweep_directory(tmp_path):
    done = run_cli(
        [
            "-m",
            "task=logic",
            "model=lstm",
            "seed=1,2",
            f"paths.log_dir={tmp_path}/o",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=0",
        ]  # fmt: skip
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().endswith(
        "error: hydra.launcher.n_jobs=0 must be a number of jobs run at once: a positive "
        "integer, or -1 for one per CPU; e.g. hydra.launcher.n_jobs=2"
    )
    _no_directory_left(tmp_path / "o")


def test_a_path_outside_ascii_says_how_to_quote_it_and_the_quoted_one_works(tmp_path):
    where = tmp_path / "dätä"
    done = run_cli(["task=logic", f"paths.data_dir={where}", "--cfg", "job"])
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: the override paths.data_dir={where} has 'ä', a character Hydra reads only "
        f"inside quotes: write it as paths.data_dir='\"{where}\"' (single quotes for the shell, "
        "double quotes for Hydra)"
    )
    quoted = run_cli(["task=logic", f'paths.data_dir="{where}"', "--cfg", "job"])
    assert quoted.returncode == 0, quoted.stderr[-2000:]
    assert f"data_dir: {where}" in quoted.stdout


def test_the_command_line_check_reads_quotes_as_hydra_does():
    assert check_command_line(["task=logic", "paths.data_dir='/tmp/dä tä'", "-m"]) is None
    assert check_command_line(['tags=["ä","b"]']) is None
    assert "has 'é'" in check_command_line(['tags=["a",é]'])
    assert check_command_line(["--cfg", "job", "é"]) is None  # not an override


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["tsk=sst"], ["tsk is not a key of the config (did you mean task?)"]),
        (  # a typo on the way to the key, and a key missing on the way
            ["task.modul.optimizer.lr=2", "task.optimizer.lr=3"],
            [
                "task.modul.optimizer.lr is not a key of task=ptb (did you mean "
                "task.module.optimizer.lr?)",
                "task.optimizer.lr is not a key of task=ptb (did you mean "
                "task.module.optimizer.lr?)",
            ],
        ),
        (  # a sweep is read by its first value; the group chosen names where the key is missing
            ["-m", "model=lstm,onlstm", "model.dropot=0.1,0.2", "hydra.run.dirr=x"],
            [
                "model.dropot is not a key of model=lstm (did you mean model.dropout?)",
                "hydra.run.dirr is not a key of hydra=default (did you mean hydra.run.dir?)",
            ],
        ),
        # an LSTM has no chunks: no key of it is near enough to be offered
        (["model=lstm", "model.chunk_size=5"], ["model.chunk_size is not a key of model=lstm"]),
    ],
)
def test_a_key_the_config_lacks_is_named_with_the_nearest_key_it_has(arguments, expected):
    message = check_override_keys(arguments, CONF)
    assert message.split(". A new key is added")[0].split("; ") == expected


def test_keys_the_config_has_or_adds_are_left_to_hydra():
    assert check_override_keys(["model=onlstm", "model.chunk_size=5", "seed=3"], CONF) is None
    assert check_override_keys(["+tsk=sst", "task.module.optimizer.lr=2"], CONF) is None
    assert check_override_keys(["-m", "task.module.optimizer.lr=interval(1,2)"], CONF) is None
    assert check_override_keys(["task=sstt", "tsk=1"], CONF) is None  # Hydra lists the tasks
    assert check_override_keys(["--config-name", "other", "tsk=1"], CONF) is None


def test_more_threads_than_cpus_and_nothing_to_train_are_warned_about():
    cpus = usable_cpus()
    base = {"mode": "fit+test", "threads": None, "trainer": {"max_epochs": 3, "max_steps": -1}}
    assert doubtful(OmegaConf.create(base)) == []
    many = OmegaConf.create({**base, "threads": cpus + 1})
    assert doubtful(many) == [
        f"threads={cpus + 1} is more than the {cpus} CPUs this process may use; threads wait for "
        f"each other then (a run at about half speed): threads={cpus} or threads=null"
    ]
    assert doubtful(OmegaConf.create({**base, "threads": cpus})) == []
    none = OmegaConf.create({**base, "trainer": {"max_epochs": 0, "max_steps": -1}})
    assert doubtful(none) == [
        "trainer.max_epochs=0: nothing will be trained, and the test reads the untrained "
        "weights; give trainer.max_epochs a number of epochs to train"
    ]
    steps = OmegaConf.create({**base, "mode": "fit", "trainer": {"max_steps": 0}})
    assert doubtful(steps) == [
        "trainer.max_steps=0: nothing will be trained; give trainer.max_steps a number of steps "
        "to train"
    ]
    assert doubtful(OmegaConf.create({**base, "mode": "test", "trainer": {"max_epochs": 0}})) == []


def test_the_warnings_reach_the_user_once(tmp_path):
    done = run_cli(
        [
            "task=logic",
            "model=lstm",
            "threads=999",
            "trainer.max_epochs=0",
            f"paths.log_dir={tmp_path}/o",
            f"paths.data_dir={tmp_path}/no_data",
        ]  # fmt: skip
    )
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert [line.split(":")[1].split("=")[0].strip() for line in warnings] == [
        "threads",
        "trainer.max_epochs",
    ], done.stderr[-2000:]
