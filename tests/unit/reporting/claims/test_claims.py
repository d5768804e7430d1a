"""``python -m treernn report claims``: the words shown / not shown / undecided / equivalent from
tests adjusted with Holm's method across the report, planned or post hoc by the plans' commits and
the jobs' start times, the best trivial trees and best layer, a ceiling, smoke checks in updates
and in epochs, incomplete sweeps, the trend from a planned earlier budget only, "no run" rows, the
plans' files and ``report plan``, and the command on run directories as sweeps leave them. (The
statistics themselves: tests/unit/reporting/claims/test_statistics.py.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from scipy import stats

from treernn.commands import main as treernn_main
from treernn.errors import UserError
from treernn.lifecycle.sweeps.layout import sweep_size
from treernn.reporting.claims.catalogue import CLAIMS, TRIVIAL_BEST, Comparison
from treernn.reporting.claims.plans import PlanError, load_plans, read_plan
from treernn.reporting.claims.render import plans_lines, reading_notes, to_markdown
from treernn.reporting.claims.rule import (
    EQUIVALENT,
    GAP_CLOSING,
    INCOMPLETE,
    NO_RUN,
    NOT_SHOWN,
    SHOWN,
    SMOKE,
    UNDECIDED,
    decide,
    decide_claims,
    settle,
)
from treernn.reporting.claims.sweeps import (
    declared_budget,
    distinct_numbers,
    improvement_at_end,
    load_sweeps,
)
from treernn.reporting.run_records import load_runs

# t quantiles from a printed t table: t(0.975, 2) = 4.303, t(0.975, 4) = 2.776
T2, T4 = 4.3027, 2.7764


def decide_alone(comparison: Comparison, sweeps, plan=None, config_dir=None):
    """One comparison decided as the only test of its report (Holm over a family of one)."""
    outcome = decide(comparison, 0, sweeps, plan, config_dir)
    settle([outcome])
    return outcome


PLATEAU = [0.50, 0.70, 0.69]  # best before the end: stopped improving
RISING = [0.50, 0.60, 0.70]  # best at the end: still improving


def make_run(
    sweep: Path,
    job: int,
    table: str | None,
    model: str,
    seed: int,
    metrics: dict[str, float],
    curve: list[float] = PLATEAU,
    monitor: str = "val/acc",
    baselines: dict[str, float] | None = None,
) -> Path:
    """A finished job of ``python train.py -m table=<table>`` (the files the reports read)."""
    run_dir = sweep / str(job)
    (run_dir / ".hydra").mkdir(parents=True)
    task = {"name": "task_of_" + str(table), "monitor": monitor}
    task["mode"] = "min" if monitor.endswith("ppl") else "max"
    config = {"seed": seed, "mode": "fit+test", "task": task, "model": {"name": model}}
    if table is not None:
        config["table_name"] = table
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    overrides = [f"model={model}", f"seed={seed}"]
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    (run_dir / "status.json").write_text(json.dumps({"status": "finished"}))
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    (run_dir / "csv").mkdir()
    rows = [f"{100 * (step + 1)},{value}" for step, value in enumerate(curve)]
    (run_dir / "csv" / "metrics.csv").write_text("\n".join([f"step,{monitor}", *rows]) + "\n")
    if baselines is not None:
        scores = {name: {"corpus_f1": value} for name, value in baselines.items()}
        (run_dir / "tree_f1.json").write_text(json.dumps({"baselines": scores}))
    return run_dir


@pytest.mark.parametrize(
    ("curves", "monitor", "expected"),
    [
        # mean over seeds 0.50, 0.60, 0.70: better at the end than anywhere before
        ([RISING, RISING], "val/acc", ("val/acc", 0.70, 0.60)),
        # seeds 0.70, 0.69 at the end: mean 0.695 < 0.70 at the second validation
        ([PLATEAU, [0.50, 0.70, 0.70]], "val/acc", None),
        # back to the best of an earlier validation, not above it: not improving
        ([[0.50, 0.70, 0.60, 0.70]], "val/acc", None),
        # perplexity: lower is better, 112.7 -> 110.4 still falling
        ([[120.0, 112.7, 110.4]], "val/ppl", ("val/ppl", 110.4, 112.7)),
        ([[120.0, 110.4, 112.7]], "val/ppl", None),
        ([[0.9]], "val/acc", None),  # one validation: nothing to compare
    ],
)
def test_improvement_at_end_compares_the_last_validation_with_the_best_before(
    tmp_path, curves, monitor, expected
):
    for job, curve in enumerate(curves):
        make_run(tmp_path, job, "t", "m", job + 1, {"test/acc": 0.5}, curve, monitor)
    runs, _ = load_runs([tmp_path])
    end = improvement_at_end(runs)
    if expected is None:
        assert end is None
    else:
        assert end[0] == expected[0] and end[1:] == pytest.approx(expected[1:])


def ops(percent: float) -> dict[str, float]:
    """Test accuracy ``percent`` at every number of operators (so ops7-12 = percent)."""
    return {f"test/acc/ops{k}": percent / 100 for k in range(1, 13)} | {"test/acc": 0.5}


def logic_sweep(root: Path) -> Path:
    sweep = root / "logic"
    models = {
        "ordered_memory": [70, 72, 74],  # - LSTM: the first interval above, shown
        "lstm": [62, 64, 66],
        "onlstm": [65, 67, 69],  # - LSTM = 3 ± 4.534: undecided
    }
    job = 0
    for model, values in models.items():
        for seed, value in enumerate(values, start=1):
            make_run(sweep, job, "logic", model, seed, ops(value))
            job += 1
    return sweep


def sst2_sweep(root: Path) -> Path:
    # OM 79, 80, 81 against LSTM 85, 86, 87: d = -6, se = sqrt(1/3 + 1/3) = 0.81650, df = 4:
    # -6 ± 2.7764 * 0.81650 = [-8.267, -3.733], on the wrong side of 0: not shown
    sweep = root / "sst2"
    for job, (model, value) in enumerate(
        [("ordered_memory", 79), ("ordered_memory", 80), ("ordered_memory", 81),
         ("lstm", 85), ("lstm", 86), ("lstm", 87)]
    ):  # fmt: skip
        make_run(sweep, job, "sst2", model, job % 3 + 1, {"test/acc": value / 100})
    return sweep


def listops_sweep(root: Path) -> Path:
    sweep = root / "listops"
    trivial = {"left_branching": 0.30, "right_branching": 0.50}
    for seed, (acc, f1) in enumerate([(90, 80), (92, 82), (94, 84)], start=1):
        metrics = {
            "test/acc": acc / 100,
            "test/parse_f1/layer1": f1,
            "test/parse_f1/layer2": f1 - 40,  # a worse layer: layer1 is the best on average
        }
        make_run(sweep, seed - 1, "listops", "ordered_memory", seed, metrics, baselines=trivial)
    for seed, acc in enumerate([60, 62, 64], start=1):
        # far below, but its validation accuracy was still rising at the end
        make_run(sweep, 2 + seed, "listops", "lstm", seed, {"test/acc": acc / 100}, RISING)
    return sweep


def lm_sweep(root: Path) -> Path:
    # perplexity, lower is better: ON-LSTM 100, 102, 104 against LSTM 108, 110, 112: d = -8,
    # interval -8 ± 4.534 = [-12.534, -3.466], on the claim's side (shown in a report of claim 1
    # alone)
    sweep = root / "lm"
    curve = [200.0, 150.0, 151.0]
    for job, (model, ppl) in enumerate(
        [("onlstm", 100), ("onlstm", 102), ("onlstm", 104),
         ("lstm", 108), ("lstm", 110), ("lstm", 112)]
    ):  # fmt: skip
        metrics = {"test/ppl": ppl, "val/ppl": 150.0}
        make_run(sweep, job, "lm", model, job % 3 + 1, metrics, curve, "val/ppl")
    return sweep


def outcomes_by_claim(tmp_path: Path) -> dict[str, tuple[str, list]]:
    sweeps = load_sweeps(
        [logic_sweep(tmp_path), sst2_sweep(tmp_path), listops_sweep(tmp_path), lm_sweep(tmp_path)]
    )
    assert set(sweeps) == {"logic", "sst2", "listops", "lm"}
    return {entry.claim.text: (entry.word, entry.outcomes) for entry in decide_claims(sweeps)}


def claim_outcome(decided, number: int):
    """The first outcome of claim ``number`` (from 1) of decide_claims' list."""
    return decided[number - 1].outcomes[0]


def claim(text_start: str, decided: dict) -> tuple[str, list]:
    (key,) = [text for text in decided if text.startswith(text_start)]
    return decided[key]


def test_each_claim_decided_from_its_table(tmp_path):
    decided = outcomes_by_claim(tmp_path)
    assert len(decided) == len(CLAIMS) == 11

    # Holm over the report's 19 comparisons, the 13 without a run counted as p = 1: the six
    # tested ones' p sorted, ListOps 5.2e-5 (x 19), trees 0.0013 (x 18), SST-2 0.0018 (x 17),
    # OM on logic and the LM 0.00805 (x 16, x 15), ON-LSTM on logic 0.140 (x 14)
    word, (outcome,) = claim("Ordered Memory beats LSTM on logic", decided)
    # t = 8 / sqrt(8/3) with 4 df: p = 0.00805, 16 p = 0.129
    assert word == UNDECIDED and outcome.reason == "Holm-adjusted p = 0.129"
    assert outcome.better == pytest.approx([70, 72, 74])
    assert outcome.worse == pytest.approx([62, 64, 66])
    assert (outcome.test.low, outcome.test.high) == pytest.approx((3.466, 12.534), 1e-3)

    word, (outcome,) = claim("ON-LSTM beats LSTM on logic", decided)
    # t = 3 / sqrt(8/3) with 4 df: p = 0.140, 14 p > 1
    assert word == UNDECIDED and outcome.reason == "Holm-adjusted p = 1"
    assert outcome.test.p == pytest.approx(2 * stats.t.sf(3 / math.sqrt(8 / 3), 4))
    assert (outcome.test.low, outcome.test.high) == pytest.approx((-1.534, 7.534), 1e-3)

    word, (outcome,) = claim("Ordered Memory beats LSTM on SST-2", decided)
    assert word == NOT_SHOWN
    assert (outcome.test.low, outcome.test.high) == pytest.approx((-8.267, -3.733), 1e-3)

    # lower perplexity is the claim's side: shown in a report of that claim alone (p = 0.00805)
    word, (outcome,) = claim("ON-LSTM language model", decided)
    assert word == UNDECIDED and outcome.reason == "Holm-adjusted p = 0.129"
    assert (outcome.test.low, outcome.test.high) == pytest.approx((-12.534, -3.466), 1e-3)
    sweeps = load_sweeps([lm_sweep(tmp_path / "alone")])
    (alone,) = decide_claims(sweeps, claims=[CLAIMS[0]])
    assert alone.word == SHOWN and alone.outcomes[0].adjusted == pytest.approx(outcome.test.p)

    # OM - LSTM = 30 on ListOps: shown, and the LSTM still improving is printed beside it (each
    # seed 0.60 -> 0.70: +10 points, no spread); no Transformer run: the claim is undecided
    word, (lstm, transformer) = claim("Ordered Memory beats LSTM and Transformer", decided)
    assert word == UNDECIDED
    assert lstm.word == SHOWN and lstm.test.low > 0
    assert lstm.improving == ["lstm: val/acc +10 ± 0 points (standard error over 3 seeds)"]
    assert transformer.word == NO_RUN and "transformer" in transformer.reason

    # the best layer (layer1: 82 on average) against the best trivial trees (right-branching,
    # 50 in each run): 32 ± 4.3027 * sqrt(4/3) = [27.032, 36.968]
    word, (outcome,) = claim("Ordered Memory's induced ListOps trees", decided)
    assert word == SHOWN
    assert outcome.metric == "parse_f1/layer1 vs right-branching"
    assert outcome.worse == pytest.approx([50, 50, 50])
    assert (outcome.test.low, outcome.test.high) == pytest.approx((27.032, 36.968), 1e-3)

    # tables without a sweep: no run
    for text in ("LdTreeLSTM", "Ordered Memory beats LSTM on systematic"):
        word, outcomes = claim(text, decided)
        assert word == NO_RUN and all(o.word == NO_RUN for o in outcomes)
    # the lm sweep has no syneval or parse F1 metric
    word, outcomes = claim("Marvin & Linzen", decided)
    assert word == NO_RUN and "no syneval_known/long_term" in outcomes[0].reason


def test_rising_numbers_read_differently():
    # logic-onlstm-24k's LSTM: a last validation above every earlier one by 0.00007
    assert distinct_numbers(0.9652449687321981, 0.965171198050181) == ("0.96524", "0.96517")
    assert distinct_numbers(0.7, 0.6) == ("0.7", "0.6")
    assert distinct_numbers(108.74, 112.41) == ("108.7", "112.4")
    # equal values stay at 10 digits instead of looping
    assert distinct_numbers(0.5, 0.5) == ("0.5", "0.5")


def test_one_seed_is_undecided(tmp_path):
    sweep = tmp_path / "one"
    make_run(sweep, 0, "sst2", "ordered_memory", 1, {"test/acc": 0.9})
    make_run(sweep, 1, "sst2", "lstm", 1, {"test/acc": 0.1})
    comparison = Comparison(("sst2",), "acc", "ordered_memory", "lstm")
    outcome = decide_alone(comparison, load_sweeps([sweep]))
    assert outcome.word == UNDECIDED and outcome.reason == "fewer than 2 seeds"


def test_trivial_trees_missing_is_no_run(tmp_path):
    sweeps = load_sweeps([logic_sweep(tmp_path)])
    comparison = Comparison(("logic",), "ops7-12", "lstm", TRIVIAL_BEST)
    assert decide(comparison, 0, sweeps).word == NO_RUN


def test_cli_prints_every_claim(tmp_path, capsys):
    out = tmp_path / "claims.md"
    sweeps = [str(logic_sweep(tmp_path)), str(sst2_sweep(tmp_path))]
    assert treernn_main(["report", "claims", *sweeps, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_text() in printed
    rows = [line for line in printed.splitlines() if line.startswith("| ")][1:]
    numbered = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert [n for n in numbered if n] == [str(k) for k in range(1, 12)]
    # SST-2's p = 0.0018 times 19 (Holm over every comparison) = 0.035: not shown; OM on logic's
    # 0.008 times 18: undecided
    assert "**not shown**" in printed and "**undecided**" in printed and "**no run**" in printed
    assert "+8.00 [+3.47, +12.53]" in printed  # OM - LSTM on logic
    assert "post hoc (rule of 2026-12-07)" in printed
    # without any sweep: every claim says no run
    assert to_markdown(decide_claims({})).count("**no run**") == 11


def test_a_sweep_that_is_not_a_table_is_one_error_line(tmp_path, capsys):
    make_run(tmp_path / "plain", 0, None, "lstm", 1, {"test/acc": 0.5})
    with pytest.raises(UserError, match="without table_name"):
        load_sweeps([tmp_path / "plain"])
    assert treernn_main(["report", "claims", str(tmp_path / "plain")]) == 1
    assert "table=<name>" in capsys.readouterr().err


def test_the_report_says_which_machines_each_tables_runs_ran_on(tmp_path):
    """Sweeps kept across machines can mix CPUs (their GEMM backends round differently): the
    report counts each table's runs by the CPUs their records name, a resumed run's in order."""
    sweep = logic_sweep(tmp_path)
    machines = {0: ["Zen 4"], 1: ["Zen 4", "Zen 5"], 2: ["Zen 4", "Zen 4"]}
    for job in range(9):
        record = {"status": "finished"}
        cpus = machines.get(job, ["Zen 5"])
        record["machines"] = [{"cpu": cpu, "threads": 1} for cpu in cpus]
        (sweep / str(job) / "status.json").write_text(json.dumps(record))
    sweeps = load_sweeps([sweep, sst2_sweep(tmp_path)])
    text = to_markdown(decide_claims(sweeps), machines=True)
    assert text.rstrip().splitlines()[-1] == (
        "Runs: logic: 2 on Zen 4, 1 on Zen 4 + Zen 5, 6 on Zen 5; sst2: 6 on ?."
    )


def set_budgets(*sweeps: tuple[Path, int]) -> None:
    """Give each sweep's runs ``trainer.max_steps`` = its budget, and their validations that
    budget's steps: the k-th of n after k * budget / n updates, logged at step k * budget / n - 1
    as the csv logger does (the last one after the budget's last update)."""
    for sweep, steps in sweeps:
        for config_file in sweep.glob("*/.hydra/config.yaml"):
            config = OmegaConf.load(config_file)
            config.trainer = {"max_steps": steps}
            OmegaConf.save(config, config_file)
            space_validations(config_file.parent.parent, budget=steps)


def space_validations(run_dir: Path, every: int | None = None, budget: int | None = None) -> None:
    """Put a run's validations ``every`` updates apart, or evenly over ``budget`` updates (the
    k-th at step k * every - 1)."""
    csv_file = run_dir / "csv" / "metrics.csv"
    header, *rows = csv_file.read_text().splitlines()
    every = every or budget // len(rows)
    rows = [f"{(k + 1) * every - 1},{row.split(',', 1)[1]}" for k, row in enumerate(rows)]
    csv_file.write_text("\n".join([header, *rows]) + "\n")


def test_a_run_its_rule_stopped_before_the_budget_is_not_still_improving(tmp_path):
    """tdlm-stop: the halving rule ends each run at its second miss, seeds at different epochs.
    Seed 1 stopped after 4 of the budget's 5 validations, at a perplexity far above the others';
    a mean over the seeds left would fall at the 5th validation by losing it (206.3 -> 188.5)."""
    curves = {
        1: [300.0, 250.0, 245.0, 246.0],  # stopped by its rule: one validation short of the budget
        2: [200.0, 190.0, 185.0, 184.0, 186.0],
        3: [210.0, 195.0, 190.0, 189.0, 191.0],
    }
    for seed, curve in curves.items():
        make_run(tmp_path, seed, "t", "m", seed, {"test/ppl": 190.0}, curve, "val/ppl")
    set_budgets((tmp_path, 500))
    space_validations(tmp_path / "1", 100)  # its 4 validations at the budget's spacing
    runs, _ = load_runs([tmp_path])
    # seeds 2 and 3: 186.5 at the 4th validation, 188.5 at the 5th: stopped improving
    assert improvement_at_end(runs) is None
    # seed 3 replaced by a seed 4 still falling at the end: improving, by the mean of seeds 2 and
    # 4 alone (183.5 after 186.5; with seed 1 in the earlier means, 206.3 would be the best before)
    falling = [210.0, 195.0, 190.0, 189.0, 181.0]
    make_run(tmp_path, 4, "t", "m", 4, {"test/ppl": 190.0}, falling, "val/ppl")
    (tmp_path / "3" / "status.json").write_text(json.dumps({"status": "failed"}))
    set_budgets((tmp_path, 500))
    space_validations(tmp_path / "1", 100)
    runs, _ = load_runs([tmp_path])
    assert improvement_at_end(runs) == ("val/ppl", pytest.approx(183.5), pytest.approx(186.5))


def test_runs_all_stopped_by_their_rule_are_not_still_improving(tmp_path):
    """Each seed's last validation a hair below its best (a miss by the rule's 0.01% threshold),
    and each stopped before the budget: nothing to gain from more updates."""
    for seed, curve in enumerate([[200.0, 190.0, 189.99], [205.0, 195.0, 194.99, 194.98]], 1):
        make_run(tmp_path, seed, "t", "m", seed, {"test/ppl": 190.0}, curve, "val/ppl")
        space_validations(tmp_path / str(seed), 100)
    runs, _ = load_runs([tmp_path])
    # no budget in the config: the longest run's end is the budget, which seed 2 reached
    assert improvement_at_end(runs) == ("val/ppl", pytest.approx(194.98), pytest.approx(194.99))
    set_budgets((tmp_path, 1000))
    for seed in (1, 2):
        space_validations(tmp_path / str(seed), 100)
    runs, _ = load_runs([tmp_path])
    assert improvement_at_end(runs) is None


def test_of_two_sweeps_of_a_table_the_claims_read_the_larger_budget(tmp_path, capsys):
    """results/tables/*/* holds a table's short and long sweeps: the claims read the long one
    (trainer.max_steps) and say which they left out; one sweep given twice is an error."""
    short = lm_sweep(tmp_path / "short")
    longer = tmp_path / "long" / "lm"
    for job, (model, ppl) in enumerate(
        [("onlstm", 90), ("onlstm", 91), ("lstm", 120), ("lstm", 121)]
    ):
        make_run(
            longer,
            job,
            "lm",
            model,
            job % 2 + 1,
            {"test/ppl": ppl},
            [200.0, 150.0, 151.0],
            "val/ppl",
        )
    set_budgets((short, 2750), (longer, 11000))
    notes: list[str] = []
    sweeps = load_sweeps([short, longer], notes)
    assert notes == []
    decided = decide_claims(sweeps)
    assert sorted(claim_outcome(decided, 1).better + claim_outcome(decided, 1).worse) == [
        90,
        91,
        120,
        121,
    ]
    read = f"claims 1, 2, 3, 11 read {longer} (11,000 updates); not {short} (2,750 updates)"
    first = (
        "Several sweeps of table lm, each comparison reading its plan's sweep, else the largest "
        "budget with every job finished that ran both its models"
    )
    assert reading_notes(decided, sweeps) == [f"{first}: {read}"]
    assert treernn_main(["report", "claims", str(short), str(longer)]) == 0
    assert f"not {short} (2,750 updates)" in capsys.readouterr().out
    with pytest.raises(UserError, match="same budget .* that ran the same jobs"):
        load_sweeps([short, short])


def test_a_sweep_without_a_finished_job_is_left_out_with_a_line(tmp_path, capsys):
    """The runner archives a sweep every few minutes, so results/tables/*/* can hold one that has
    only its multirun.yaml and unfinished jobs: the claims leave it out and say so, and only
    when no sweep given has a finished job is it an error."""
    finished = lm_sweep(tmp_path / "short")
    started = tmp_path / "started" / "lm"
    make_run(started, 0, "lm", "onlstm", 1, {"test/ppl": 80.0}, [200.0, 150.0], "val/ppl")
    (started / "0" / "status.json").write_text(json.dumps({"status": "running"}))
    (started / "multirun.yaml").write_text("hydra: {}\n")
    just_archived = tmp_path / "archived" / "lm"  # an archive of a sweep with none finished
    just_archived.mkdir(parents=True)
    (just_archived / "multirun.yaml").write_text("hydra: {}\n")
    notes: list[str] = []
    sweeps = load_sweeps([finished, started, just_archived], notes)
    assert [sweep.path for sweep in sweeps["lm"]] == [finished]
    assert notes == [f"Left out, no finished job yet: {path}" for path in (started, just_archived)]
    assert treernn_main(["report", "claims", str(finished), str(started)]) == 0
    assert f"Left out, no finished job yet: {started}.\n" in capsys.readouterr().out
    with pytest.raises(UserError, match="no finished run in .*started"):
        load_sweeps([started])
    assert treernn_main(["report", "claims", str(started)]) == 1
    assert "once a job has finished" in capsys.readouterr().err


def save_multirun(sweep: Path, params: dict[str, str], task: list[str], sweeper: str) -> None:
    """The part of a sweep's multirun.yaml that says how many jobs its command makes."""
    hydra = {"sweeper": {"_target_": sweeper, "params": params}, "overrides": {"task": task}}
    sweep.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"hydra": hydra}), sweep / "multirun.yaml")


BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def test_the_size_of_a_sweep_from_its_multirun_yaml(tmp_path):
    # the table's params, a command-line override replacing one of them (3 models x 5 seeds),
    # a range() and a fixed value; another sweeper or a glob cannot be counted
    save_multirun(tmp_path, {"model": "onlstm,lstm", "seed": "1,2,3,4,5"}, ["table=lm"], BASIC)
    assert sweep_size(tmp_path) == 10
    task = ["table=logic", "model=onlstm,lstm,ordered_memory", "trainer.max_steps=10000"]
    save_multirun(tmp_path, {"model": "onlstm,lstm", "seed": "1,2,3,4,5"}, task, BASIC)
    assert sweep_size(tmp_path) == 15
    save_multirun(tmp_path, {"seed": "range(1,4)"}, ["model=lstm"], BASIC)
    assert sweep_size(tmp_path) == 3
    save_multirun(tmp_path, {"model": "glob(*)"}, [], BASIC)
    assert sweep_size(tmp_path) is None
    save_multirun(tmp_path, {"seed": "1,2"}, [], "hydra_plugins.optuna_sweeper.OptunaSweeper")
    assert sweep_size(tmp_path) is None
    assert sweep_size(tmp_path / "none") is None


def test_a_longer_sweep_still_running_does_not_hide_a_complete_shorter_one(tmp_path):
    """results/ holds tdlm-long (complete) while tdlm-stop is still running: until every job
    of the longer sweep has finished, the claims read the complete shorter one and say why."""
    short = lm_sweep(tmp_path / "short")  # 6 jobs, ON-LSTM 100-104 against LSTM 108-112
    save_multirun(short, {"model": "onlstm,lstm", "seed": "1,2,3"}, ["table=lm"], BASIC)
    longer = tmp_path / "long" / "lm"
    save_multirun(longer, {"model": "onlstm,lstm", "seed": "1,2,3"}, ["table=lm"], BASIC)
    for job, (model, seed, ppl) in enumerate([("onlstm", 1, 90.0), ("onlstm", 2, 91.0)]):
        make_run(longer, job, "lm", model, seed, {"test/ppl": ppl}, [200.0, 150.0], "val/ppl")
    set_budgets((short, 2750), (longer, 11000))
    sweeps = load_sweeps([short, longer])
    decided = decide_claims(sweeps)
    outcome = claim_outcome(decided, 1)
    assert sorted(outcome.better + outcome.worse) == [100, 102, 104, 108, 110, 112]
    assert reading_notes(decided, sweeps)[0].endswith(
        f"claims 1, 2, 3, 11 read {short} (2,750 updates, 6 of 6 jobs finished); "
        f"not {longer} (11,000 updates, 2 of 6 jobs finished)"
    )
    # the longer sweep done: it is read
    for job, (model, seed) in enumerate([("onlstm", 3), ("lstm", 1), ("lstm", 2), ("lstm", 3)]):
        make_run(longer, job + 2, "lm", model, seed, {"test/ppl": 95.0}, [200.0, 150.0], "val/ppl")
    assert claim_outcome(decide_claims(load_sweeps([short, longer])), 1).sweep.path == longer
    # neither complete: the largest budget, as before
    (short / "5" / "status.json").write_text(json.dumps({"status": "running"}))
    (longer / "5" / "status.json").write_text(json.dumps({"status": "running"}))
    outcome = claim_outcome(decide_claims(load_sweeps([short, longer])), 1)
    assert outcome.better == [90.0, 91.0, 95.0]


def onlstm_against_lstm(sweep: Path, table: str, onlstm: list[int], lstm: list[int]) -> None:
    """A sweep of ``table`` with ON-LSTM's and then the LSTM's runs (seeds 1-3) at these
    accuracies (%) at every number of operators."""
    values = [("onlstm", value) for value in onlstm] + [("lstm", value) for value in lstm]
    for job, (model, value) in enumerate(values):
        make_run(sweep, job, table, model, job % 3 + 1, ops(value))


def test_a_longer_sweep_of_two_models_leaves_the_others_comparison_on_the_shorter(tmp_path):
    """logic-long ran ON-LSTM, LSTM and Ordered Memory; a longer re-run of ON-LSTM and LSTM alone
    (claim 4 still rising) decides claim 4, while claim 5 (Ordered Memory against LSTM) keeps
    reading the sweep that ran both of its models, each at one budget."""
    short = logic_sweep(tmp_path / "short")
    longer = tmp_path / "long" / "logic"
    # ON-LSTM 80, 82, 84 against LSTM 60, 62, 64 (ops7-12): d = 20, se = sqrt(8/3), df = 4
    onlstm_against_lstm(longer, "logic", [80, 82, 84], [60, 62, 64])
    set_budgets((short, 10000), (longer, 40000))
    sweeps = load_sweeps([short, longer])
    decided = decide_claims(sweeps)
    onlstm, om = claim_outcome(decided, 4), claim_outcome(decided, 5)
    assert (onlstm.sweep.path, om.sweep.path) == (longer, short)
    assert (onlstm.better, onlstm.worse) == ([80.0, 82.0, 84.0], [60.0, 62.0, 64.0])
    assert decided[3].word == "shown" and onlstm.test.difference == pytest.approx(20.0)
    assert (om.better, om.worse) == ([70.0, 72.0, 74.0], [62.0, 64.0, 66.0])
    assert reading_notes(decided, sweeps) == [
        "Several sweeps of table logic, each comparison reading its plan's sweep, else the largest "
        "budget with every job "
        f"finished that ran both its models: claim 4 read {longer} (40,000 updates); "
        f"claim 5 read {short} (10,000 updates)"
    ]
    # the machines line counts both sweeps' runs (6 + 9), each once
    assert to_markdown(decided, machines=True).rstrip().endswith("Runs: logic: 15 on ?.")


def add_overrides(sweep: Path, *overrides: str) -> None:
    """Give each of the sweep's runs these command-line overrides beside its model and seed."""
    for path in sweep.glob("*/.hydra/overrides.yaml"):
        OmegaConf.save(OmegaConf.create([*OmegaConf.load(path), *overrides]), path)


def test_a_model_run_later_on_a_sweeps_terms_is_compared_with_its_models(tmp_path, capsys):
    """logic-80k ran ON-LSTM and LSTM; Ordered Memory's runs at the same budget and overrides,
    in a sweep of their own, are read with them as one sweep (claim 5 from both, the LSTM's runs
    not run twice), while other overrides, or a job run in both, stay an error."""
    pair = tmp_path / "logic-80k" / "logic"
    onlstm_against_lstm(pair, "logic", [80, 82, 84], [60, 62, 64])
    added = tmp_path / "logic-80k-om" / "logic"
    for job, value in enumerate([90, 92, 94]):
        make_run(added, job, "logic", "ordered_memory", job + 1, ops(value))
    save_multirun(pair, {"model": "onlstm,lstm", "seed": "1,2,3"}, ["table=logic"], BASIC)
    save_multirun(added, {"seed": "1,2,3"}, ["table=logic", "model=ordered_memory"], BASIC)
    terms = ("trainer.max_steps=80000", "trainer.val_check_interval=1000")
    for sweep, name in ((pair, "logic-80k"), (added, "logic-80k-om")):
        add_overrides(sweep, "table=logic", *terms, f"sweep_id={name}")
    shorter = logic_sweep(tmp_path / "logic-long")  # Ordered Memory 70-74 against LSTM 62-66
    set_budgets((pair, 80000), (added, 80000), (shorter, 10000))

    sweeps = load_sweeps([pair, added, shorter])
    assert [sweep.paths for sweep in sweeps["logic"]] == [(pair, added), (shorter,)]
    decided = decide_claims(sweeps)
    om = claim_outcome(decided, 5)
    # Ordered Memory 90, 92, 94 against the LSTM's 60, 62, 64: d = 30
    assert (om.better, om.worse) == ([90.0, 92.0, 94.0], [60.0, 62.0, 64.0])
    assert om.sweep.paths == (pair, added) and om.test.difference == pytest.approx(30.0)
    assert claim_outcome(decided, 4).better == [80.0, 82.0, 84.0]
    assert reading_notes(decided, sweeps)[0].endswith(
        f"claims 4, 5 read {pair} + {added} (80,000 updates, 9 of 9 jobs finished); "
        f"not {shorter} (10,000 updates)"
    )
    assert treernn_main(["report", "claims", str(pair), str(added), str(shorter)]) == 0
    assert f"read {pair} + {added} (80,000" in capsys.readouterr().out
    # the two alone: the line still names both
    assert treernn_main(["report", "claims", str(pair), str(added)]) == 0
    assert f"claims 4, 5 read {pair} + {added} (80,000" in capsys.readouterr().out

    # validated every 500 updates where the others were every 1,000: not one sweep
    other = tmp_path / "other" / "logic"
    for job, value in enumerate([90, 92, 94]):
        make_run(other, job, "logic", "ordered_memory", job + 1, ops(value))
    add_overrides(other, "table=logic", "trainer.max_steps=80000", "trainer.val_check_interval=500")
    set_budgets((other, 80000))
    differ = r"other overrides \(trainer.val_check_interval=1000 against 500\)"
    with pytest.raises(UserError, match=differ):
        load_sweeps([pair, other])
    # the same job in both: which one would be read?
    with pytest.raises(UserError, match="ran the same jobs \\(model=ordered_memory seed=1; "):
        load_sweeps([pair, added, added])


def test_claim_4_reads_the_papers_width_where_both_models_ran_there(tmp_path):
    """table=logic_onlstm (ON-LSTM and LSTM at the ON-LSTM paper's width) decides claim 4 over
    table=logic whatever their budgets, once it has finished runs of both models; claim 5 stays
    on table=logic."""
    logic = logic_sweep(tmp_path / "scaled")
    wide = tmp_path / "wide" / "logic_onlstm"
    # ON-LSTM 75, 77, 79 against LSTM 70, 72, 74: d = 5, se = sqrt(8/3), df = 4
    onlstm_against_lstm(wide, "logic_onlstm", [75, 77, 79], [70, 72, 74])
    set_budgets((logic, 40000), (wide, 2000))
    decided = decide_claims(load_sweeps([logic, wide]))
    onlstm, om = claim_outcome(decided, 4), claim_outcome(decided, 5)
    assert (onlstm.table, onlstm.sweep.path, om.table) == ("logic_onlstm", wide, "logic")
    assert (onlstm.better, onlstm.worse) == ([75.0, 77.0, 79.0], [70.0, 72.0, 74.0])
    assert onlstm.test.low == pytest.approx(5 - T4 * math.sqrt(8 / 3), 1e-3)

    # only ON-LSTM's runs have finished at the paper's width: claim 4 reads table=logic
    for job in ("3", "4", "5"):
        shutil.rmtree(wide / job)
    onlstm = claim_outcome(decide_claims(load_sweeps([logic, wide])), 4)
    assert (onlstm.table, onlstm.better) == ("logic", [65.0, 67.0, 69.0])


def test_reading_sweeps_loads_neither_torch_nor_lightning(tmp_path):
    """``report claims``, ``report table`` and ``sweep status`` on sweeps of finished jobs read
    json, yaml and csv: answered in a fraction of a second, without torch or Lightning (seconds of
    imports; a checkpoint to inspect is read with torch, lazily)."""
    sweep = logic_sweep(tmp_path)
    save_multirun(sweep, {"model": "ordered_memory,lstm,onlstm", "seed": "1,2,3"}, [], BASIC)
    commands = (["report", "claims", str(sweep)], ["report", "table", str(sweep)],
                ["sweep", "status", str(sweep)])  # fmt: skip
    for command in commands:
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "treernn", *command],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
        assert "treernn.commands" in imported  # the import log is there
        assert not {"torch", "lightning"} & imported, command
    assert "9 jobs" in result.stdout and "9 finished" in result.stdout


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path):
    """``report claims ... | head``: the reader closes the pipe before the table is written; the
    command stops with the status SIGPIPE gives (141) and no traceback."""
    sweep = logic_sweep(tmp_path)
    save_multirun(sweep, {"model": "ordered_memory,lstm,onlstm", "seed": "1,2,3"}, [], BASIC)
    process = subprocess.Popen(
        [sys.executable, "-m", "treernn", "report", "claims", str(sweep)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    process.stdout.close()  # the reader is gone before the first line
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141, stderr
    assert stderr == ""


# ----------------------------------------------------------------------------- smoke checks
def test_a_sweep_below_its_tables_declared_budget_is_a_smoke_check(tmp_path):
    """conf/table/sst2.yaml declares 270 updates: a 30-update sweep decides nothing, whatever
    its interval says (sst2_sweep's: [-8.267, -3.733], 'not shown' at a real budget)."""
    sweep = sst2_sweep(tmp_path)
    set_budgets((sweep, 30))
    assert declared_budget("sst2") == (270, None)
    decided = decide_claims(load_sweeps([sweep]))
    (outcome,) = decided[8].outcomes
    assert decided[8].word == SMOKE and outcome.word == SMOKE and outcome.test is None
    assert outcome.reason == "30 updates, below table sst2's declared 270"
    # at the declared budget it is a verdict
    set_budgets((sweep, 270))
    assert decide_claims(load_sweeps([sweep]))[8].word == NOT_SHOWN
    # a table the checkout does not declare (an installed package without conf/): no smoke check
    assert declared_budget("sst2", tmp_path) == (None, None)


def test_still_improving_is_printed_with_its_rise_and_standard_error(tmp_path):
    # seeds' val/acc 0.60 -> 0.70, 0.61 -> 0.72, 0.59 -> 0.71 between the 2nd and 3rd validation
    # (the mean's best before the end is the 2nd, 0.60): rises 10, 11, 12 points, mean 11,
    # std 1, standard error 1/sqrt(3) = 0.577
    sweep = tmp_path / "sst2"
    curves = [[0.5, 0.60, 0.70], [0.5, 0.61, 0.72], [0.5, 0.59, 0.71]]
    for job, (model, value) in enumerate(
        [("ordered_memory", v) for v in (79, 80, 81)] + [("lstm", v) for v in (85, 86, 87)]
    ):
        curve = curves[job % 3] if model == "lstm" else PLATEAU
        make_run(sweep, job, "sst2", model, job % 3 + 1, {"test/acc": value / 100}, curve)
    comparison = Comparison(("sst2",), "acc", "ordered_memory", "lstm")
    outcome = decide_alone(comparison, load_sweeps([sweep]))
    assert outcome.word == NOT_SHOWN  # information only
    assert outcome.improving == ["lstm: val/acc +11 ± 0.58 points (standard error over 3 seeds)"]
    text = to_markdown(decide_claims(load_sweeps([sweep])))
    assert "- claim 9, ordered_memory > lstm on acc: lstm: val/acc +11 ± 0.58 points" in text
    assert "- claim 9: hidden 100 with embeddings trained from scratch (no GloVe" in text


# ----------------------------------------------------------------------------- the rule's parts
def two_sided(difference: float, se: float, df: float) -> float:
    return 2 * stats.t.sf(abs(difference) / se, df)


def test_holm_across_the_report_can_undo_a_lone_significant_difference(tmp_path):
    """SST-2: OM 80.65, 81.65, 82.65 against LSTM 78, 79, 80: d = 2.65, se = sqrt(2/3), 4 df:
    p = 0.0315, shown alone; in the report of every claim beside the logic sweep's two tests
    (OM - LSTM p = 0.008, ON-LSTM - LSTM p = 0.14), Holm runs over its 19 comparisons, the 16
    without a run counted as p = 1, and multiplies the second smallest p by 18: 0.567."""
    sweep = tmp_path / "sst2"
    for job, (model, value) in enumerate(
        [("ordered_memory", v) for v in (80.65, 81.65, 82.65)] + [("lstm", v) for v in (78, 79, 80)]
    ):
        make_run(sweep, job, "sst2", model, job % 3 + 1, {"test/acc": value / 100})
    set_budgets((sweep, 270))
    comparison = Comparison(("sst2",), "acc", "ordered_memory", "lstm")
    alone = decide_alone(comparison, load_sweeps([sweep]))
    assert alone.test.p == pytest.approx(two_sided(2.65, math.sqrt(2 / 3), 4), rel=1e-6)
    assert alone.test.p < 0.05 and alone.adjusted == alone.test.p and alone.word == SHOWN
    logic = logic_sweep(tmp_path)
    set_budgets((logic, 2000))
    decided = decide_claims(load_sweeps([sweep, logic]))
    (outcome,) = decided[8].outcomes
    ps = sorted(
        o.test.p for entry in decided for o in entry.outcomes if o.test is not None
    )  # logic OM - LSTM 0.008, ON-LSTM - LSTM 0.14, this 0.0497
    assert ps == pytest.approx(sorted([two_sided(8, math.sqrt(8 / 3), 4), outcome.test.p,
                                       two_sided(3, math.sqrt(8 / 3), 4)]), rel=1e-9)  # fmt: skip
    assert outcome.adjusted == pytest.approx(18 * outcome.test.p)  # second smallest of 19
    assert outcome.word == UNDECIDED and outcome.reason == "Holm-adjusted p = 0.567"
    # those without a run keep their word, and the family does not shrink as sweeps finish
    assert decided[0].word == NO_RUN and decided[0].outcomes[0].adjusted is None
    (only,) = decide_claims(load_sweeps([sweep]))[8].outcomes
    assert only.adjusted == pytest.approx(19 * outcome.test.p) and only.word == UNDECIDED


def test_a_ceiling_is_said_and_tested_exactly(tmp_path):
    """Ordered Memory's ListOps trees at 100 F1 in all three seeds against balanced trees at
    13.58: no t interval (no spread), the sign test: p = 2 (1/2)^3 = 0.25, undecided."""
    sweep = tmp_path / "listops"
    for seed in (1, 2, 3):
        metrics = {"test/acc": 0.99, "test/parse_f1/layer1": 100.0}
        make_run(sweep, seed, "listops", "ordered_memory", seed, metrics,
                 baselines={"balanced": 0.1358})  # fmt: skip
    set_budgets((sweep, 1500))
    comparison = Comparison(("listops",), "parse_f1/layer*", "ordered_memory", TRIVIAL_BEST)
    outcome = decide_alone(comparison, load_sweeps([sweep]))
    assert outcome.test.method == "exact sign test" and not outcome.test.has_interval
    assert outcome.test.p == pytest.approx(0.25) and outcome.word == UNDECIDED
    assert outcome.ceilings == ["3 of 3 seeds at 100.00"] and outcome.effect is None
    text = to_markdown(decide_claims(load_sweeps([sweep])))
    assert "+86.42 (no interval: 3 of 3 seeds at 100.00)" in text


def test_a_sweep_budgeted_in_epochs_below_its_declared_epochs_is_a_smoke_check(tmp_path):
    conf = tmp_path / "conf" / "table"
    conf.mkdir(parents=True)
    (conf / "sst2.yaml").write_text("trainer:\n  max_epochs: 5\n")
    sweep = sst2_sweep(tmp_path)
    for config_file in sweep.glob("*/.hydra/config.yaml"):
        config = OmegaConf.load(config_file)
        config.trainer = {"max_epochs": 1}
        OmegaConf.save(config, config_file)
    comparison = Comparison(("sst2",), "acc", "ordered_memory", "lstm")
    outcome = decide_alone(comparison, load_sweeps([sweep]), config_dir=tmp_path / "conf")
    assert (outcome.word, outcome.reason) == (SMOKE, "1 epochs, below table sst2's declared 5")


def test_an_incomplete_sweep_is_never_a_verdict(tmp_path):
    sweep = sst2_sweep(tmp_path)  # 6 finished jobs of 8
    save_multirun(sweep, {"model": "ordered_memory,lstm", "seed": "1,2,3,4"}, ["table=sst2"], BASIC)
    set_budgets((sweep, 270))
    decided = decide_claims(load_sweeps([sweep]))
    (outcome,) = decided[8].outcomes
    assert decided[8].word == INCOMPLETE and outcome.test is None
    assert outcome.reason == "6 of 8 jobs finished: not a verdict yet"


# ----------------------------------------------------------------------------- plans
def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip


def committed_plan(root: Path, text: str, name: str = "claim-09.yaml") -> Path:
    folder = root / "plans"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    if not (folder / ".git").exists():
        git(folder, "init", "-q")
    git(folder, "add", name)
    git(folder, "commit", "-q", "-m", "plan")
    return folder


SST2_PLAN = """\
claim: 9
table: sst2
sweep: sst2
budget: {max_steps: 270}
seeds: [1, 2, 3]
alpha: 0.05
smallest_effect: 2.0
"""


def set_started(sweep: Path, when: str) -> None:
    for status in sweep.glob("*/status.json"):
        record = json.loads(status.read_text())
        status.write_text(json.dumps({**record, "started": when}))


def test_a_verdict_is_planned_only_from_jobs_that_started_after_the_plans_commit(tmp_path):
    sweep = sst2_sweep(tmp_path)  # OM 79-81 against LSTM 85-87: not shown
    set_budgets((sweep, 270))
    plans = load_plans(committed_plan(tmp_path, SST2_PLAN))
    set_started(sweep, "2020-01-01T00:00:00")
    decided = decide_claims(load_sweeps([sweep]), plans=plans)
    (outcome,) = decided[8].outcomes
    assert decided[8].word == NOT_SHOWN and not decided[8].planned
    assert decided[8].label == "post hoc (rule of 2026-12-07)"
    assert outcome.post_hoc.startswith("6 of its 6 jobs started before the plan was fixed (")
    set_started(sweep, "2999-01-01T00:00:00")
    decided = decide_claims(load_sweeps([sweep]), plans=plans)
    assert decided[8].planned and decided[8].label == "planned" and decided[8].word == NOT_SHOWN
    # the power is given for the plan's smallest effect of interest
    assert decided[8].outcomes[0].power_effect == 2.0
    # a plan edited since its commit is not fixed: post hoc again
    (tmp_path / "plans" / "claim-09.yaml").write_text(SST2_PLAN.replace("2.0", "1.0"))
    decided = decide_claims(load_sweeps([sweep]), plans=load_plans(tmp_path / "plans"))
    assert decided[8].outcomes[0].post_hoc == "its plan claim-09.yaml is not committed as it stands"
    # a kept sweep of another name: post hoc, the planned sweep named
    (tmp_path / "plans" / "claim-09.yaml").write_text(SST2_PLAN)
    kept = tmp_path / "kept" / "sst2-kept"
    sst2_sweep(tmp_path / "kept").rename(kept)
    set_budgets((kept, 270))
    decided = decide_claims(load_sweeps([kept]), plans=plans)
    assert decided[8].outcomes[0].post_hoc == (
        "reads sst2-kept, not the planned sweep sst2 (not run yet)"
    )
    # the planned sweep begun beside it, none of its jobs finished: said as started (the pages,
    # which read complete sweeps only, say the same of one with some jobs finished)
    begun = tmp_path / "kept" / "sst2"
    begun.mkdir()
    (begun / "multirun.yaml").write_text("hydra: {}\n")
    decided = decide_claims(load_sweeps([kept]), plans=plans)
    assert decided[8].outcomes[0].post_hoc == (
        "reads sst2-kept, not the planned sweep sst2 (started, not finished)"
    )


def test_an_amendment_that_decides_nothing_keeps_a_verdict_planned(tmp_path):
    """A plan committed on 2026-01-01, its jobs started on 2026-01-02: planned. A later commit that
    adds what a decision would need (``needs``) or rewords ``why`` leaves it planned and is listed
    as an amendment; one that changes the seeds fixes the plan again, after its jobs started."""
    sweep = sst2_sweep(tmp_path)  # OM 79-81 against LSTM 85-87: not shown
    set_budgets((sweep, 270))
    set_started(sweep, "2026-01-02T00:00:00+00:00")
    folder = tmp_path / "plans"

    def commit(text: str, date: str) -> None:
        folder.mkdir(exist_ok=True)
        (folder / "claim-09.yaml").write_text(text)
        if not (folder / ".git").exists():
            git(folder, "init", "-q")
        git(folder, "add", "claim-09.yaml")
        env = {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date}
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", date],
            cwd=folder, check=True, capture_output=True, env={**os.environ, **env},
        )  # fmt: skip

    def verdict() -> tuple[bool, str, list[str]]:
        plans = load_plans(folder)
        (outcome,) = decide_claims(load_sweeps([sweep]), plans=plans)[8].outcomes
        return outcome.post_hoc == "", outcome.post_hoc, plans_lines(plans)

    commit(SST2_PLAN, "2026-01-01T00:00:00+00:00")
    planned, _, (line,) = verdict()
    assert planned and "fixed 2026-01-01 00:00 UTC)" in line and "amended" not in line
    commit(SST2_PLAN + "needs: 14 seeds a side and a GPU-free day\n", "2026-01-03T00:00:00+00:00")
    commit(SST2_PLAN + "needs: 14 seeds a side\nwhy: because\n", "2026-01-04T00:00:00+00:00")
    planned, _, (line,) = verdict()
    assert planned, "an amendment of needs and why fixed the plan again"
    assert "fixed 2026-01-01 00:00 UTC, amended 2026-01-03 (" in line
    assert ": needs), amended 2026-01-04 (" in line and ": needs, why)" in line
    assert line.endswith("sweep sst2; a decision needs 14 seeds a side")
    # the seeds decide: changed, the plan is fixed by that commit, after its jobs started
    commit(SST2_PLAN.replace("[1, 2, 3]", "[1, 2, 3, 4]"), "2026-01-05T00:00:00+00:00")
    planned, why, (line,) = verdict()
    assert not planned
    assert why == "6 of its 6 jobs started before the plan was fixed (2026-01-05T00:00+00:00)"
    assert "fixed 2026-01-05 00:00 UTC)" in line


def test_equivalence_within_a_planned_margin_refutes_a_claimed_difference(tmp_path):
    """Marvin & Linzen long-term: ON-LSTM 50, 51, 52, 50, 51, 52 against LSTM the same: d = 0,
    se = sqrt(2 * 0.8 / 6); within +-3: both one-sided tests reject, and the claim (ON-LSTM is
    better on long-term) is not shown."""
    sweep = tmp_path / "lm"
    values = [50, 51, 52, 50, 51, 52]
    job = 0
    for model in ("onlstm", "lstm"):
        for seed, value in enumerate(values, start=1):
            metrics = {"test/ppl": 100.0, "test/syneval_known/long_term": value,
                       "test/syneval_known/short_term": 60.0 + seed}  # fmt: skip
            make_run(sweep, job, "lm", model, seed, metrics, [200.0, 150.0, 151.0], "val/ppl")
            job += 1
    set_budgets((sweep, 2750))
    plan = SST2_PLAN.replace("claim: 9", "claim: 3").replace("table: sst2", "table: lm")
    plan = plan.replace("sweep: sst2", "sweep: lm").replace("max_steps: 270", "max_steps: 2750")
    plan = plan.replace("seeds: [1, 2, 3]", "seeds: [1, 2, 3, 4, 5, 6]")
    plan += "comparisons: [0]\nequivalence_margins: {0: 3.0}\n"
    plans = load_plans(committed_plan(tmp_path, plan, "claim-03.yaml"))
    set_started(sweep, "2999-01-01T00:00:00")
    decided = decide_claims(load_sweeps([sweep]), plans=plans)
    long_term = decided[2].outcomes[0]
    se = math.sqrt(2 * 0.8 / 6)
    assert long_term.tost_p == pytest.approx(stats.t.sf(3 / se, 10), rel=1e-9)
    assert long_term.word == EQUIVALENT and long_term.reason == "within +-3 (two one-sided tests)"
    assert decided[2].word == NOT_SHOWN
    assert long_term.planned and not decided[2].outcomes[1].planned  # short-term: not planned


def test_the_trend_comes_from_a_planned_earlier_budget_only(tmp_path):
    """OM against LSTM on logic: gap 14 at 5,000 and 8 at 10,000 updates: the line reaches -4
    at 20,000. As a planned earlier budget it turns shown into undecided (gap closing); as a kept
    sweep that no plan names it changes nothing (no substitute trend)."""
    sweeps = []
    for name, om, lstm in (
        ("early", [64, 66, 68], [50, 52, 54]),
        ("late", [70, 72, 74], [62, 64, 66]),
    ):
        sweep = tmp_path / name / "logic"
        for job, (model, value) in enumerate(
            [("ordered_memory", v) for v in om] + [("lstm", v) for v in lstm]
        ):
            make_run(sweep, job, "logic", model, job % 3 + 1, ops(value))
        sweeps.append(sweep)
    set_budgets((sweeps[0], 5000), (sweeps[1], 10000))
    # directories are named by their table; the plan names the sweeps by their folders
    early, late = tmp_path / "early-5k", tmp_path / "late-10k"
    early.mkdir(), late.mkdir()
    sweeps[0].rename(early / "logic-5k"), sweeps[1].rename(late / "logic-10k")
    sweeps = [early / "logic-5k", late / "logic-10k"]
    comparison = Comparison(("logic",), "ops7-12", "ordered_memory", "lstm")
    assert decide_alone(comparison, load_sweeps(sweeps)).trend is None  # no plan: no trend
    plan = (
        "claim: 5\ntable: logic\nsweep: logic-10k\nbudget: {max_steps: 10000}\nseeds: [1, 2, 3]\n"
        "earlier: {sweep: logic-5k, budget: {max_steps: 5000}}\nsmallest_effect: 5\n"
    )
    plans = load_plans(committed_plan(tmp_path, plan, "claim-05.yaml"))
    for sweep in sweeps:
        set_started(sweep, "2999-01-01T00:00:00")
    outcome = decide_alone(comparison, load_sweeps(sweeps), plans[5])
    assert outcome.trend.describe() == (
        "+14.00 at 5,000 -> +8.00 at 10,000; on that line -4.00 at 20,000"
    )
    assert (outcome.word, outcome.reason) == (UNDECIDED, GAP_CLOSING)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("claim: 99\n", "claim 99: the report has claims 1 to 11"),
        (SST2_PLAN + "colour: red\n", "unknown keys colour"),
        (SST2_PLAN.replace("[1, 2, 3]", "[1, 1, 2]"), "seeds repeats a seed"),
        (SST2_PLAN.replace("table: sst2", "table: lm"), "table 'lm' is not a table of claim 9"),
        (SST2_PLAN + "overrides: [seed=4]\n", "overrides sets seed, which the plan's own keys set"),
        (SST2_PLAN.replace("{max_steps: 270}", "{max_steps: -1}"), "budget.max_steps is -1"),
        (SST2_PLAN + "equivalence_margins: {0: -2}\n", "equivalence_margins.0 is -2"),
        ("- a list\n", "not a mapping of plan keys"),
    ],
)
def test_a_damaged_plan_is_one_line_naming_the_key(tmp_path, text, message):
    path = tmp_path / "claim-09.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as refused:
        read_plan(path)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert str(path) in str(refused.value)


def test_report_plan_writes_seeds_from_a_power_analysis(tmp_path, capsys):
    """The SST-2 sweep's spread: OM 79, 80, 81 and LSTM 85, 86, 87 (sd 1 each). For a smallest
    effect of 2 points at alpha 0.05 / 19 with 80% power: the fewest seeds a side that reach it."""
    from treernn.reporting.claims.plans import family_size
    from treernn.reporting.claims.statistics import power, seeds_needed

    sweep = sst2_sweep(tmp_path)
    set_budgets((sweep, 270))
    out = tmp_path / "claim-09.yaml"
    command = ["report", "plan", "--claim", "9", "--sweep", "sst2-planned", "--budget",
               "trainer.max_steps=270", "--effect", "2", "--spread-from", str(sweep),
               "--out", str(out)]  # fmt: skip
    assert treernn_main(command) == 0
    plan = read_plan(out)
    strict = 0.05 / family_size()
    expected = seeds_needed(2.0, 1.0, 1.0, strict, 0.8)
    assert (
        power(2.0, 1.0, 1.0, expected, strict) >= 0.8 > power(2.0, 1.0, 1.0, expected - 1, strict)
    )
    assert plan.seeds == tuple(range(101, 101 + expected))
    assert plan.command() == [
        "table=sst2", "trainer.max_steps=270",
        f"seed={','.join(str(seed) for seed in range(101, 101 + expected))}",
        "sweep_id=sst2-planned",
    ]  # fmt: skip
    assert "commit it before the sweep starts" in capsys.readouterr().out


def test_a_plans_cost_reads_the_cpu_time_runs_recorded_and_resumed_runs_too(tmp_path):
    """At 270 updates: Ordered Memory's runs recorded 1 (two attempts of half an hour), 2 and 1.5
    CPU hours; the LSTM's: one ran in one attempt of 30 minutes on 1 thread (no record), one was
    resumed without a record (left out: its wall time holds the gap), one recorded 0.25 hours.
    At 540 updates: OM's median of 2, 4 and 3 is 3; the LSTM's of 1 and 0.5 is 0.75."""
    from treernn.reporting.claims.plans import core_hours

    sweep = sst2_sweep(tmp_path)
    set_budgets((sweep, 270))
    wall = {"started": "2026-01-01T00:00:00", "ended": "2026-01-01T00:30:00"}
    for job, machines in enumerate([
        [{"cpu_seconds": 1800}, {"cpu_seconds": 1800}], [{"cpu_seconds": 7200}],
        [{"cpu_seconds": 5400}], [{}], [{}, {}], [{"cpu_seconds": 900}],
    ]):  # fmt: skip
        (sweep / str(job) / "status.json").write_text(
            json.dumps({"status": "finished", "machines": machines, **wall})
        )
    runs = load_sweeps([sweep])["sst2"][0].runs
    by_model = {model: [run for run in runs if run.model == model] for model in
                ("ordered_memory", "lstm")}  # fmt: skip
    hours, how = core_hours(by_model, ("max_steps", 540))
    assert hours == pytest.approx({"ordered_memory": 3.0, "lstm": 0.75})
    assert how == (
        "median of kept runs (ordered_memory: 3 recorded CPU time; lstm: 1 recorded CPU time, "
        "1 in one attempt)"
    )


def test_a_plan_gives_each_comparison_its_own_smallest_effect(tmp_path):
    path = tmp_path / "claim-10.yaml"
    path.write_text(
        "claim: 10\ntable: tdlm\nsweep: tdlm-planned\nbudget: {max_steps: 7680}\n"
        "seeds: [1, 2]\nsmallest_effect: {0: 10, 2: 3}\nrun: false\nneeds: more seeds\n"
    )
    plan = read_plan(path)
    assert (plan.effect_of(0), plan.effect_of(2), plan.effect_of(4)) == (10.0, 3.0, None)
    assert not plan.run and plan.needs == "more seeds"


def test_a_planned_sweep_read_with_a_kept_one_of_its_terms_is_decided_alone(tmp_path):
    """sst2-planned beside the kept sst2-phrases (same budget and overrides): load_sweeps reads
    them as one sweep; the plan decides from its own sweep's runs (planned), and a plan that pools
    them decides from all of them (post hoc: the kept jobs started before it)."""
    kept = tmp_path / "kept" / "sst2-phrases"
    sst2_sweep(tmp_path / "kept").rename(kept)
    planned = tmp_path / "new" / "sst2"
    for job, (model, value) in enumerate(
        [("ordered_memory", v) for v in (90, 91, 92)] + [("lstm", v) for v in (80, 81, 82)]
    ):
        make_run(planned, job, "sst2", model, job % 3 + 4, {"test/acc": value / 100})
    set_budgets((kept, 270), (planned, 270))
    set_started(kept, "2020-01-01T00:00:00")
    set_started(planned, "2999-01-01T00:00:00")
    plans = load_plans(committed_plan(tmp_path, SST2_PLAN.replace("[1, 2, 3]", "[4, 5, 6]")))
    sweeps = load_sweeps([kept, planned])
    assert len(sweeps["sst2"]) == 1 and len(sweeps["sst2"][0].paths) == 2  # read as one
    decided = decide_claims(sweeps, plans=plans)
    (outcome,) = decided[8].outcomes
    assert outcome.better == [90.0, 91.0, 92.0] and outcome.worse == [80.0, 81.0, 82.0]
    assert decided[8].planned and decided[8].word == SHOWN
    (note,) = reading_notes(decided, sweeps)  # the plan's sweep alone, the kept one not read
    assert note.endswith(f": claim 9 read {planned} (270 updates); not {kept}")
    pooled = SST2_PLAN.replace("[1, 2, 3]", "[4, 5, 6]") + "pool_kept: true\n"
    (tmp_path / "plans" / "claim-09.yaml").write_text(pooled)
    git(tmp_path / "plans", "commit", "-q", "-am", "pooled")
    decided = decide_claims(sweeps, plans=load_plans(tmp_path / "plans"))
    (outcome,) = decided[8].outcomes
    assert len(outcome.better) == 6 and not decided[8].planned
    assert outcome.post_hoc.startswith("6 of its 12 jobs started before the plan")
    (note,) = reading_notes(decided, sweeps)
    assert note.endswith(f": claim 9 read {kept} + {planned} (270 updates)")


def test_a_planned_sweep_still_running_beside_a_kept_one_is_incomplete(tmp_path):
    kept = tmp_path / "kept" / "sst2-phrases"
    sst2_sweep(tmp_path / "kept").rename(kept)
    planned = tmp_path / "new" / "sst2"
    make_run(planned, 0, "sst2", "ordered_memory", 4, {"test/acc": 0.9})
    save_multirun(planned, {"model": "ordered_memory,lstm", "seed": "4,5,6"}, ["table=sst2"], BASIC)
    set_budgets((kept, 270), (planned, 270))
    plans = load_plans(committed_plan(tmp_path, SST2_PLAN.replace("[1, 2, 3]", "[4, 5, 6]")))
    decided = decide_claims(load_sweeps([kept, planned]), plans=plans)
    (outcome,) = decided[8].outcomes
    assert (decided[8].word, outcome.reason) == (
        INCOMPLETE,
        "1 of 6 jobs finished: not a verdict yet",
    )
