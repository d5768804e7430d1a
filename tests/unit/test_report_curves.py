"""``python -m treernn report curves``: a validation metric by update over seeds, grouped like the
table, worked out by hand from csv logger files."""

from __future__ import annotations

import pytest

from tests.unit.test_report_table import make_run
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
