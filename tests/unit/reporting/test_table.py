"""``python -m treernn report table``: runs grouped into rows, mean/std/max worked out by hand, the
papers' rows, the md/csv/png files, unfinished runs left out, the error lines, wandb, and the
table at the end of a real multirun."""

from __future__ import annotations

import csv
import io
import json
import runpy
import sys
import types
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.paths import REPO_ROOT
from treernn.commands import main as treernn_main
from treernn.lifecycle.sweeps.layout import sweep_job_dirs
from treernn.reporting.paper import PAPER_LENGTH_ACCURACY, PAPER_RESULTS, PAPER_SYSGEN_ACCURACY
from treernn.reporting.run_records import load_runs
from treernn.reporting.table import Cell, report_table
from treernn.reporting.table_output import format_cell, to_markdown, write_table


def make_run(
    root: Path,
    name: str,
    overrides: list[str],
    metrics: dict[str, float] | None,
    *,
    task: str = "logic",
    model: str = "lstm",
    seed: int = 1,
    split: str = "full",
    status: str | None = "finished",
    logger: str = "csv",
    num_classes: int = 2,
) -> Path:
    """A run directory as ``python train.py`` leaves it (only the files the report reads)."""
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
    config = {
        "seed": seed,
        "mode": "fit+test",
        "task": {"name": task, "datamodule": {"split": split, "num_classes": num_classes}},
        "model": {"name": model, "dropout": 0.1},
        "logger": {logger: {"project": "treernn-test"}},
    }
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    if status is not None:
        (run_dir / "status.json").write_text(json.dumps({"status": status, "task": task}))
    if metrics is not None:
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return run_dir


def logic_sweep(root: Path) -> Path:
    """model=lstm,onlstm x seed=1,2 (jobs 0-3) and seed 3 of lstm (job 4), in one sweep dir."""
    sweep = root / "sweep"
    accuracies = {
        ("lstm", 1): 0.50,
        ("lstm", 2): 0.60,
        ("lstm", 3): 0.70,
        ("onlstm", 1): 0.80,
        ("onlstm", 2): 0.90,
    }
    for job, ((model, seed), acc) in enumerate(accuracies.items()):
        metrics = {"test/acc": acc, "test/loss": 1.0, "val/acc": 0.1}
        metrics |= {f"test/acc/ops{k}": acc - k / 100 for k in range(1, 13)}
        if model == "onlstm":
            metrics["test/parse_f1/layer1"] = 40.0 + seed
        make_run(
            sweep,
            str(job),
            ["trainer=smoke", f"model={model}", f"seed={seed}"],
            metrics,
            model=model,
            seed=seed,
        )
    return sweep


def row(table, label):
    (found,) = [r for r in table.rows if r.label == label]
    return found


# ----------------------------------------------------------------------------- rows and cells
def test_rows_are_the_differing_overrides_seed_aside(tmp_path):
    table = report_table([logic_sweep(tmp_path)], paper="none")
    assert table.row_keys == ["model"]  # trainer=smoke is the same everywhere, seed is left out
    assert [r.label for r in table.rows] == ["model=lstm", "model=onlstm"]
    assert [r.n for r in table.rows] == [3, 2]
    assert [len(r.runs) for r in table.rows] == [3, 2]


def test_mean_sample_std_and_max_by_hand(tmp_path):
    table = report_table([logic_sweep(tmp_path)], paper="none")
    lstm = row(table, "model=lstm").cells["acc"]
    # 50, 60, 70: mean 60, sample std sqrt(((-10)^2 + 0 + 10^2) / 2) = 10, max 70
    assert (lstm.mean, lstm.std, lstm.max, lstm.n) == pytest.approx((60.0, 10.0, 70.0, 3))
    onlstm = row(table, "model=onlstm").cells
    # 80, 90: mean 85, std sqrt((25 + 25) / 1) = 7.071
    assert onlstm["acc"].std == pytest.approx(50**0.5)
    assert onlstm["ops7"].mean == pytest.approx(85.0 - 7)
    # a run's 7-12 mean is (acc - 7..12 %) averaged: acc - 9.5; then the mean over seeds
    assert onlstm["ops7-12"].mean == pytest.approx(85.0 - 9.5)
    assert onlstm["parse_f1/layer1"].mean == pytest.approx(41.5)  # 41, 42: already in %
    assert "loss" not in onlstm and "parse_f1/layer1" not in row(table, "model=lstm").cells
    assert format_cell(lstm, 1) == "60.0 ± 10.0 (max 70.0)"
    assert format_cell(Cell.of([61.25]), 1) == "61.2"  # one run: the value alone
    assert format_cell(Cell.of([60.0, 70.0]), 1, n=3) == "65.0 ± 7.1 (max 70.0) [n=2]"
    assert format_cell(None, 1) == "-"


def test_columns_in_order(tmp_path):
    table = report_table([logic_sweep(tmp_path)], paper="none")
    keys = [c.key for c in table.columns]
    assert keys == [*(f"ops{k}" for k in range(1, 13)), "ops7-12", "acc", "parse_f1/layer1"]


# ----------------------------------------------------------------------------- paper rows
def test_paper_rows_of_ordered_memory_table_1(tmp_path):
    table = report_table([logic_sweep(tmp_path)])
    assert table.papers == ["logic"]
    om = row(table, "Ordered Memory (paper)")
    assert om.kind == "paper"
    assert (om.cells["ops12"].mean, om.cells["ops12"].std) == (92, 1.1)
    assert om.cells["parse_f1/layer1"].mean == 84.3
    lstm = row(table, "LSTM (paper)").cells
    assert [lstm[f"ops{k}"].mean for k in range(7, 13)] == [88, 84, 80, 78, 71, 69]
    assert lstm["ops7-12"].mean == pytest.approx(470 / 6, abs=0.01)
    assert "ops1" not in lstm
    text = to_markdown(table)
    assert "| LSTM (paper) | paper |" in text and "Ordered Memory Table 1" in text
    # the legacy views used by the plot and `report accuracy` come from the same data
    assert PAPER_LENGTH_ACCURACY["ON-LSTM (paper)"][7] == 91
    assert PAPER_SYSGEN_ACCURACY["Ordered Memory (paper)"] == {"A": 94, "B": 91, "C": 81}


def test_systematic_generalisation_partitions_are_columns(tmp_path):
    sweep = tmp_path / "sweep"
    job = 0
    for model, base in (("lstm", 0.5), ("ordered_memory", 0.9)):
        for split, drop in (("A", 0.0), ("B", 0.1), ("C", 0.2)):
            for seed in (1, 2):
                metrics = {
                    "test/acc": 0.99,
                    f"test/sysgen_{split}/acc": base - drop + seed / 100,
                    f"test/sysgen_{split}/acc/ops3": 0.1,
                }
                overrides = [f"model={model}", f"task.datamodule.split={split}", f"seed={seed}"]
                run = make_run(
                    sweep, str(job), overrides, metrics, model=model, seed=seed, split=split
                )
                # Ordered Memory's tree F1 and the trivial trees' (written after testing): the
                # partitions' table has no F1 column, so no rows of trivial trees either
                scores = {"corpus_f1": 0.4, "sentence_f1": 0.5, "sentences": 10}
                data = {"test": {"layer1": scores}, "baselines": {"right_branching": scores}}
                (run / "tree_f1.json").write_text(json.dumps(data))
                job += 1
    table = report_table([sweep])
    assert table.papers == ["sysgen"]
    assert [r.label for r in table.rows][:2] == ["model=lstm", "model=ordered_memory"]
    assert [r.kind for r in table.rows].count("baseline") == 0
    assert [c.key for c in table.columns] == ["sysgen_A", "sysgen_B", "sysgen_C"]
    om = row(table, "model=ordered_memory")
    assert om.n == 2
    assert om.cells["sysgen_B"].mean == pytest.approx(81.5)
    assert om.cells["sysgen_B"].max == pytest.approx(82.0)
    assert row(table, "ON-LSTM (paper)").cells["sysgen_C"].mean == 60


def test_perplexity_and_parsing_rows_of_on_lstm(tmp_path):
    for seed, ppl in ((1, 60.0), (2, 62.0)):
        metrics = {"test/ppl": ppl, "val/ppl": ppl + 2, "val/parse_f1/layer2": 40.0 + seed}
        make_run(tmp_path, f"run{seed}", [f"seed={seed}"], metrics, task="ptb", model="onlstm")
    (tmp_path / "run1" / "parse_eval.json").write_text(
        json.dumps(
            {
                "tables": [
                    {
                        "gold": {"name": "sample10"},
                        "rows": [
                            {
                                "name": "right_branching",
                                "kind": "baseline",
                                "corpus_f1": {"mean": 0.566},
                            }
                        ],
                    },
                    {
                        "gold": {"name": "sample"},
                        "rows": [
                            {
                                "name": "right_branching",
                                "kind": "baseline",
                                "corpus_f1": {"mean": 0.394},
                                "sentence_f1": {"mean": 0.399},
                            },
                            {"name": "layer2", "kind": "system", "corpus_f1": {"mean": 0.4}},
                        ],
                    },
                ]
            }
        )
    )
    table = report_table([tmp_path])
    assert table.papers == ["ptb", "parsing"]
    onlstm = row(table, "onlstm")  # nothing differs but the seed: the model's name
    assert onlstm.cells["ppl"].mean == 61.0 and onlstm.cells["val_ppl"].max == 64.0
    assert onlstm.cells["parse_f1/layer2"].mean == 41.5  # PTB: the validation parse F1
    assert row(table, "ON-LSTM (paper)").cells["ppl"].mean == 56.17
    # trivial trees: a row with the same number under every layer, corpus and sentence F1 each
    # under its own columns
    right = row(table, "right-branching")
    assert right.kind == "baseline"
    assert right.cells["parse_f1/layer2"].mean == pytest.approx(39.4)
    assert right.cells["parse_f1_sentence/layer3"].mean == pytest.approx(39.9)
    # the paper's Table 2 is sentence-averaged F1 (the authors' script): its rows sit under the
    # sentence F1 columns, and leave the corpus F1 columns empty
    paper = row(table, "right-branching (paper)")
    assert paper.cells["parse_f1_sentence/layer3"].mean == 39.8
    assert not any(key.startswith("parse_f1/") for key in paper.cells)
    assert row(table, "ON-LSTM (paper)").cells["parse_f1_sentence/layer2"].mean == 47.7
    assert "| test ppl |" in to_markdown(table)


def test_baselines_of_report_tree_f1_become_rows(tmp_path):
    sweep = logic_sweep(tmp_path)
    scores = {"corpus_f1": 0.25, "sentence_f1": 0.2, "depth": 3.0, "sentences": 10}
    (sweep / "3" / "tree_f1_test.json").write_text(
        json.dumps({"layers": {"layer1": scores}, "baselines": {"balanced": scores}})
    )
    table = report_table([sweep], paper="none")
    assert row(table, "balanced trees").cells["parse_f1/layer1"].mean == 25.0


def test_baselines_written_by_the_test_pass_become_rows(tmp_path):
    # the tree-F1 callback's tree_f1.json (after testing) has the trivial trees of the same
    # sentences; two runs' right-branching F1 (0.3, 0.5) give the row's mean 40 and std
    sweep = logic_sweep(tmp_path)
    for job, f1 in (("2", 0.3), ("3", 0.5)):
        scores = {"corpus_f1": f1, "sentence_f1": f1, "sentences": 10}
        data = {"test": {"layer1": scores}, "baselines": {"right_branching": scores}}
        (sweep / job / "tree_f1.json").write_text(json.dumps(data))
    cell = row(report_table([sweep], paper="none"), "right-branching").cells["parse_f1/layer1"]
    assert cell.mean == pytest.approx(40.0) and cell.std == pytest.approx(14.142136)


def test_sst_paper_follows_the_number_of_classes(tmp_path):
    for classes in (2, 5):
        root = tmp_path / str(classes)
        metrics = {"test/acc": 0.5, "test/acc/len1-10": 0.4}
        make_run(root, "0", [], metrics, task="sst", num_classes=classes)
        table = report_table([root])
        assert table.papers == [f"sst{classes}"]
        expected = PAPER_RESULTS[f"sst{classes}"]["Ordered Memory"]["acc"].mean
        assert row(table, "Ordered Memory (paper)").cells["acc"].mean == expected
        assert [c.label for c in table.columns] == ["len1-10", "acc"]


# ----------------------------------------------------------------------------- files and CLI
def test_cli_writes_md_csv_and_plot(tmp_path, capsys):
    sweep = logic_sweep(tmp_path)
    assert treernn_main(["report", "table", str(sweep)]) == 0
    printed = capsys.readouterr().out
    md = (sweep / "table.md").read_text()
    assert md in printed
    assert "| model=lstm | 3 | 59.0 ± 10.0 (max 69.0) |" in md
    rows = list(csv.DictReader(io.StringIO((sweep / "table.csv").read_text())))
    lstm = rows[0]
    assert (lstm["model"], lstm["kind"], lstm["n"]) == ("model=lstm", "run", "3")
    assert float(lstm["acc_mean"]) == pytest.approx(60.0)
    assert float(lstm["acc_std"]) == pytest.approx(10.0)
    assert (float(lstm["acc_max"]), lstm["acc_n"]) == (pytest.approx(70.0), "3")
    assert lstm["parse_f1/layer1_mean"] == ""
    # the runs named relative to the table's directory: the same from any checkout (results/)
    assert lstm["runs"].split() == ["0", "1", "2"]
    assert rows[2]["model"] == "Ordered Memory (paper)" and rows[2]["ops7_mean"] == "98"
    assert (sweep / "table.png").stat().st_size > 1000


def test_out_prefix_and_no_plot_without_operators(tmp_path, capsys):
    make_run(tmp_path / "a", "0", ["model=lstm"], {"test/acc": 0.5}, task="sst")
    make_run(tmp_path / "b", "0", ["model=onlstm"], {"test/acc": 0.6}, task="sst", model="onlstm")
    out = tmp_path / "reports" / "sst"
    args = ["report", "table", str(tmp_path / "a" / "0"), str(tmp_path / "b" / "0")]
    assert treernn_main([*args, "--out", str(out), "--paper", "none"]) == 0
    assert (tmp_path / "reports" / "sst.md").is_file()
    sst = list(csv.DictReader(io.StringIO((tmp_path / "reports" / "sst.csv").read_text())))
    assert [row["runs"] for row in sst] == ["../a/0", "../b/0"]
    assert not (tmp_path / "reports" / "sst.png").exists()
    assert "(paper)" not in capsys.readouterr().out
    # default prefix of several directories: their common parent
    assert treernn_main(args) == 0
    assert (tmp_path / "table.md").is_file()


def test_unfinished_runs_are_left_out_and_listed(tmp_path):
    sweep = logic_sweep(tmp_path)
    make_run(sweep, "5", ["model=lstm", "seed=9"], None, status="failed")
    make_run(sweep, "6", ["model=lstm", "seed=8"], None, status="running")
    make_run(sweep, "7", ["model=lstm", "seed=7"], None, status=None)
    runs, skipped = load_runs([sweep])
    assert len(runs) == 5
    assert [(path.name, reason.split()[0]) for path, reason in skipped] == [
        ("5", "failed"),
        ("6", "running"),
        ("7", "no"),
    ]
    text = to_markdown(report_table([sweep]))
    assert "left out (3 runs that did not finish cleanly):" in text
    assert f"- {sweep.resolve() / '5'}: failed" in text
    write_table(report_table([sweep]), sweep / "table")
    assert "- 5: failed" in (sweep / "table.md").read_text().splitlines()


def test_a_diverged_run_is_never_a_row(tmp_path):
    """A run stopped as diverged is listed with its error; one that finished with a metric that
    is not a number is left out too, so neither averages into its model's row."""
    sweep = logic_sweep(tmp_path)
    diverged = make_run(sweep, "5", ["model=gru", "seed=1"], None, status="failed", model="gru")
    record = json.loads((diverged / "status.json").read_text())
    record["error"] = "training diverged: val/ppl is 1.7e+14 after epoch 0, worse than ..."
    (diverged / "status.json").write_text(json.dumps(record))
    make_run(sweep, "6", ["model=gru", "seed=2"], {"test/acc": float("nan")}, model="gru")
    table = report_table([sweep])
    assert [r.label for r in table.rows if r.kind == "run"] == ["model=lstm", "model=onlstm"]
    reasons = dict(table.skipped)
    assert reasons[(sweep / "5").resolve()].startswith("failed: training diverged: val/ppl is")
    assert reasons[(sweep / "6").resolve()] == (
        "finished with metrics that are not numbers (test/acc=nan)"
    )
    assert "training diverged" in to_markdown(table)


def test_a_model_named_after_its_config_file_is_named_in_the_table(tmp_path):
    """A model yaml without ``name:`` gets its file's name through ${hydra:runtime.choices.model},
    which the saved config keeps unresolved; the run's record has the name."""
    run = make_run(tmp_path, "0", [], {"test/acc": 0.5}, task="sst", model="gru")
    config = OmegaConf.load(run / ".hydra" / "config.yaml")
    config.model.name = "${hydra:runtime.choices.model}"
    OmegaConf.save(config, run / ".hydra" / "config.yaml")
    (run / "status.json").write_text(json.dumps({"status": "finished", "model": "gru"}))
    (only,) = [r for r in report_table([run], paper="none").rows]
    assert only.label == "gru"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("empty", "holds no run (no .hydra/config.yaml below it)"),
        ("missing", "does not exist"),
        ("no_test", "finished without test results"),
        ("mixed", "runs of several tasks (logic: 1 runs, sst: 1 runs)"),
        ("unfinished", "no finished run to report"),
        ("paper", None),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, setup, message):
    target = tmp_path / "runs"
    target.mkdir()
    if setup == "missing":
        target = tmp_path / "nowhere"
    elif setup == "no_test":
        make_run(target, "0", [], {"val/acc": 0.5})
    elif setup == "mixed":
        make_run(target, "0", [], {"test/acc": 0.5})
        make_run(target, "1", [], {"test/acc": 0.5}, task="sst")
    elif setup == "unfinished":
        make_run(target, "0", [], None, status="failed")
    elif setup == "paper":  # argparse refuses an unknown paper itself
        with pytest.raises(SystemExit):
            treernn_main(["report", "table", str(target), "--paper", "nature"])
        assert "invalid choice" in capsys.readouterr().err
        return
    assert treernn_main(["report", "table", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_listops_rows_of_ordered_memory(tmp_path):
    metrics = {"test/acc": 0.7, "test/acc/len51-100": 0.6, "test/parse_f1/layer1": 90.0}
    metrics["test/acc/len1-50"] = 0.8
    make_run(tmp_path, "0", [], metrics, task="listops", model="ordered_memory")
    table = report_table([tmp_path])
    assert table.papers == ["listops"]
    assert [c.key for c in table.columns] == [
        "acc/len1-50",
        "acc/len51-100",
        "acc",
        "parse_f1/layer1",
    ]
    assert row(table, "Ordered Memory (paper)").cells["parse_f1/layer1"].mean == 100
    assert row(table, "LSTM (paper)").cells["acc"].std == 1.5


def test_csv_logger_metrics_when_metrics_json_is_missing(tmp_path):
    run_dir = make_run(tmp_path, "0", [], None)
    (run_dir / "csv").mkdir()
    (run_dir / "csv" / "metrics.csv").write_text(
        "epoch,step,test/acc,test/acc/ops1,val/acc\n0,3,,,0.4\n0,3,0.625,0.5,\n"
    )
    table = report_table([run_dir], paper="none")
    assert table.rows[0].cells["acc"].mean == 62.5 and table.rows[0].cells["ops1"].mean == 50.0


# ----------------------------------------------------------------------------- wandb
class FakeWandb(types.ModuleType):
    def __init__(self):
        super().__init__("wandb")
        self.inits: list[dict] = []
        self.summary: dict = {}
        self.finished = 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return types.SimpleNamespace(summary=self.summary, dir=kwargs["dir"])

    def finish(self):
        self.finished += 1

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, data


def test_wandb_gets_the_table_offline(tmp_path, monkeypatch, capsys):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sweep = logic_sweep(tmp_path)
    assert treernn_main(["report", "table", str(sweep), "--wandb"]) == 0
    (init,) = fake.inits
    assert init["mode"] == "offline" and init["project"] == "treernn"
    table = fake.summary["report/table"]
    assert table.columns[:6] == ["model", "kind", "n", "ops1 mean", "ops1 std", "ops1 max"]
    assert table.data[0][:3] == ["model=lstm", "run", 3]
    assert fake.finished == 1
    assert "logged the table to wandb" in capsys.readouterr().out


def test_runs_logged_to_wandb_send_the_table_there(tmp_path, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    make_run(tmp_path, "0", [], {"test/acc": 0.5}, logger="wandb")
    assert treernn_main(["report", "table", str(tmp_path)]) == 0
    assert fake.inits[0]["mode"] == "disabled"
    assert fake.inits[0]["project"] == "treernn-test"  # the runs' own project


# ----------------------------------------------------------------------------- the sweep's end
def sweep_summary():
    """The multirun's Hydra callback as the sweep's config builds it, with the report it names."""
    hydra_conf = OmegaConf.load(REPO_ROOT / "conf/hydra/default.yaml")
    return instantiate(hydra_conf.callbacks.sweep_summary)


def sweep_config(log_dir: Path, name: str):
    return OmegaConf.create(
        {"hydra": {"sweep": {"dir": f"{log_dir}/multirun/logic/onlstm/{name}"}}}
    )


def test_sweep_jobs_of_every_model_are_found(tmp_path):
    for model, jobs in (("lstm", "01"), ("onlstm", "23")):
        for job in jobs:
            make_run(tmp_path / "multirun" / "logic" / model / "T1", job, [], {"test/acc": 0.5})
    make_run(tmp_path / "multirun" / "logic" / "lstm" / "T0", "0", [], {"test/acc": 0.5})
    # the sweep's config, its directory unresolved as Hydra hands it to the callback
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": "${paths.log_dir}/multirun/${task.name}/${model.name}/${now:x}"},
                "overrides": {"task": ["model=lstm,onlstm", "task=logic"]},
            },
            "paths": {"log_dir": str(tmp_path)},
            "task": {"name": "logic"},
            "model": {"name": "onlstm"},
        }
    )
    OmegaConf.register_new_resolver("now", lambda _: "T1", replace=True)
    try:
        jobs = sweep_job_dirs(config)
    finally:
        OmegaConf.clear_resolver("now")
    assert [(job.parent.parent.name, job.name) for job in jobs] == [
        ("lstm", "0"),
        ("lstm", "1"),
        ("onlstm", "2"),
        ("onlstm", "3"),
    ]


def test_two_tables_sweeps_of_one_sweep_id_stay_apart(tmp_path):
    """``table=lm sweep_id=x`` and ``table=tdlm sweep_id=x`` share the last part of their
    directories; the table's name is not a key the sweep varies, so each sweep reports its own
    jobs (the tdlm sweep once printed "runs of several tasks" for the lm sweep's jobs)."""
    make_run(tmp_path / "tables" / "lm" / "x", "0", [], {"test/ppl": 100.0})
    for job in "01":
        make_run(tmp_path / "tables" / "tdlm" / "x", job, [], {"test/ppl": 200.0})
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": "${paths.log_dir}/tables/${table_name}/${test_sweep_name:}"},
                "sweeper": {"params": {"model": "ld_treelstm,lstm", "seed": "1,2"}},
                "overrides": {"task": ["table=tdlm", "sweep_id=x"]},
            },
            "paths": {"log_dir": str(tmp_path)},
            "table_name": "tdlm",
        }
    )
    OmegaConf.register_new_resolver("test_sweep_name", lambda: "x")
    try:
        jobs = sweep_job_dirs(config)
    finally:
        OmegaConf.clear_resolver("test_sweep_name")
    assert jobs == [tmp_path / "tables" / "tdlm" / "x" / job for job in "01"]
    # a sweep over experiments (or tables) can change any key: every named part is a wildcard
    config.hydra.overrides.task = ["experiment=a,b", "sweep_id=x"]
    OmegaConf.register_new_resolver("test_sweep_name", lambda: "x")
    try:
        assert len(sweep_job_dirs(config)) == 3
    finally:
        OmegaConf.clear_resolver("test_sweep_name")


def test_a_broken_report_does_not_hide_the_sweep_summary(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "multirun" / "logic" / "onlstm" / "T1"
    make_run(sweep, "0", [], {"test/acc": 0.5})
    make_run(sweep, "1", [], {"val/acc": 0.5})  # no test results: the table is one line
    config = sweep_config(tmp_path, "T1")
    sweep_summary().on_multirun_end(config)
    captured = capsys.readouterr()
    assert "sweep finished: 2 jobs" in captured.out
    assert "sweep table: " in captured.err and "without test results" in captured.err

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the report")

    monkeypatch.setattr("treernn.reporting.table.report_table", broken)
    with pytest.raises(SystemExit) as exit_:
        sweep_summary().on_multirun_end(config)
    assert exit_.value.code == 1
    captured = capsys.readouterr()
    assert "RuntimeError: a bug in the report" in captured.err
    assert captured.out.rstrip().endswith(f"sweep finished: 2 jobs in {sweep}")


def test_failed_jobs_still_get_the_table_of_the_others(tmp_path, capsys):
    sweep = tmp_path / "multirun" / "logic" / "onlstm" / "T1"
    make_run(sweep, "0", ["seed=1"], {"test/acc": 0.5})
    make_run(sweep, "1", ["seed=2"], None, status="failed")
    with pytest.raises(SystemExit):
        sweep_summary().on_multirun_end(sweep_config(tmp_path, "T1"))
    captured = capsys.readouterr()
    assert "| lstm | 1 |" in captured.out and (sweep / "table.md").is_file()
    assert "sweep: 1 of 2 jobs did not finish" in captured.err
    # a job named by its overrides and its status, and its error where it has one
    assert "  job 1 [seed=2]: failed\n" in captured.err


# ----------------------------------------------------------------------------- a real sweep
def test_real_multirun_prints_and_writes_the_table(tmp_path, monkeypatch, capsys, data_dir):
    """2 models x 2 seeds of logic on trainer=smoke, in this process, then the command."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.setenv("TREERNN_DATA_DIR", str(data_dir))
    monkeypatch.setenv("TREERNN_SWEEP_ID", "sweep-under-test")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    argv = [
        "train.py",
        "-m",
        "trainer=smoke",
        "task=logic",
        "model=lstm,onlstm",
        "seed=1,2",
        "model.hidden_size=20",
        "task.module.embedding_size=16",
        "task.datamodule.train_limit=200",
        f"paths.log_dir={tmp_path}",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    GlobalHydra.instance().clear()
    try:
        runpy.run_path(str(REPO_ROOT / "train.py"), run_name="__main__")
    except SystemExit as exit_:
        assert not exit_.code, capsys.readouterr().err[-3000:]
    finally:
        GlobalHydra.instance().clear()
    printed = capsys.readouterr().out
    sweep = tmp_path / "multirun" / "logic" / "onlstm" / "sweep-under-test"
    assert "sweep finished: 4 jobs" in printed
    assert "| model=lstm | 2 |" in printed and "| model=onlstm | 2 |" in printed
    assert "| ON-LSTM (paper) | paper |" in printed
    assert {p.name for p in sweep.glob("table.*")} == {"table.md", "table.csv", "table.png"}
    # and the learning curves of the same rows (smoke: validated once, at its last update)
    curves = (sweep / "curves.md").read_text()
    assert "| model=lstm | 2 |" in curves and "val/acc (%) by update" in curves
    assert (sweep / "curves.png").is_file()

    # the command on the model directories' parent gives the same rows
    assert treernn_main(["report", "table", str(tmp_path / "multirun" / "logic")]) == 0
    md = (tmp_path / "multirun" / "logic" / "table.md").read_text()
    assert md.splitlines()[2:4] == (sweep / "table.md").read_text().splitlines()[2:4]
