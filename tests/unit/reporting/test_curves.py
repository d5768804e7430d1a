"""``python -m treernn report curves``: a validation metric by update over seeds, grouped like the
table, worked out by hand from csv logger files."""

from __future__ import annotations

import pytest

from tests.unit.reporting.test_table import make_run
from treernn.commands import main as treernn_main
from treernn.reporting.curves import learning_curves, to_markdown


def write_csv(run_dir, rows):
    """A csv logger file: training rows without validation between the validated ones."""
    path = run_dir / "csv" / "version_0" / "metrics.csv"
    path.parent.mkdir(parents=True)
    lines = ["epoch,step,train/loss,val/acc,val/loss"]
    for step, acc in rows:
        lines.append(f"0,{step - 1},0.9,,")
        lines.append(f"0,{step},,{acc},1.0")
    path.write_text("\n".join(lines) + "\n")


def sweep(tmp_path, splits=("full",)):
    root = tmp_path / "sweep"
    job = 0
    for split in splits:
        for model, accs in {"lstm": (0.5, 0.6), "ordered_memory": (0.7, 0.9)}.items():
            for seed, acc in zip((1, 2), accs):
                overrides = [f"model={model}", f"seed={seed}", f"task.datamodule.split={split}"]
                metrics = {"test/acc": acc}
                run = make_run(
                    root, str(job), overrides, metrics, model=model, seed=seed, split=split
                )
                write_csv(run, [(9, acc / 2), (19, acc)])
                job += 1
    return root


def test_mean_std_max_per_update_by_hand(tmp_path):
    curves = learning_curves([sweep(tmp_path)])
    assert curves.metric == "val/acc" and curves.steps == [9, 19]
    lstm = curves.rows["model=lstm"]
    assert lstm[19].mean == pytest.approx(55.0)  # (50 + 60) / 2, in %
    assert lstm[19].std == pytest.approx(7.0710678)  # sample std of 50, 60
    assert lstm[9].max == pytest.approx(30.0)
    assert curves.rows["model=ordered_memory"][19].mean == pytest.approx(80.0)
    text = to_markdown(curves)
    assert "| model=lstm | 2 | 27.5 ± 3.5 (max 30.0) | 55.0 ± 7.1 (max 60.0) |" in text


def test_each_partition_is_a_row_of_its_own(tmp_path):
    curves = learning_curves([sweep(tmp_path, splits=("A", "B"))])
    assert set(curves.rows) == {
        f"model={m} split={s}" for m in ("lstm", "ordered_memory") for s in ("A", "B")
    }
    assert curves.rows["model=lstm split=B"][19].mean == pytest.approx(55.0)


def test_cli_writes_md_and_png(tmp_path, capsys):
    root = sweep(tmp_path)
    assert treernn_main(["report", "curves", str(root), "--metric", "val/loss"]) == 0
    out = capsys.readouterr().out
    assert "val/loss by update" in out and "| model=lstm | 2 | 1.0 ± 0.0 | 1.0 ± 0.0 |" in out
    assert (root / "curves.md").is_file() and (root / "curves.png").stat().st_size > 0


def test_a_metric_nobody_logged_is_one_error_line(tmp_path, capsys):
    root = sweep(tmp_path)
    assert treernn_main(["report", "curves", str(root), "--metric", "val/ppl"]) != 0
    err = capsys.readouterr().err
    assert "no run logged val/ppl" in err and "Traceback" not in err


def test_the_plot_marks_the_updates_after_a_seed_stopped():
    """Three seeds; the third stops after update 20 (a recipe's own rule): the mean at 30 and 40
    is over two, so those updates are the dashed part, joined at 20."""
    from treernn.reporting.curves import split_at_fewer_seeds
    from treernn.reporting.table import Cell

    row = {
        10: Cell.of([1.0, 2.0, 3.0]),
        20: Cell.of([2.0, 3.0, 4.0]),
        30: Cell.of([3.0, 4.0]),
        40: Cell.of([4.0, 5.0]),
    }
    assert split_at_fewer_seeds(row, 3) == ([10, 20], [20, 30, 40])
    every_seed = {step: cell for step, cell in row.items() if step <= 20}
    assert split_at_fewer_seeds(every_seed, 3) == ([10, 20], [])
    # a row none of whose updates has every run (one run logged at other updates)
    assert split_at_fewer_seeds({30: Cell.of([3.0, 4.0])}, 3) == ([], [30])


def test_report_curves_plots_a_row_whose_seeds_stopped_at_different_updates(tmp_path):
    root = tmp_path / "sweep"
    for job, (seed, rows) in enumerate(
        {1: [(9, 0.4), (19, 0.5), (29, 0.6)], 2: [(9, 0.5), (19, 0.55)]}.items()
    ):
        run = make_run(
            root,
            str(job),
            ["model=lstm", f"seed={seed}"],
            {"test/acc": 0.5},
            model="lstm",
            seed=seed,
        )
        write_csv(run, rows)
    assert treernn_main(["report", "curves", str(root)]) == 0
    assert "[n=1]" in (root / "curves.md").read_text()
    assert (root / "curves.png").stat().st_size > 0
