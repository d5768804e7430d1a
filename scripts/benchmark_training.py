"""Whole training updates in fp32 and bf16-mixed, as ``python train.py`` runs them.

``benchmark_recurrence.py`` and ``benchmark_ordered_memory.py`` time a model alone. A user who asks
for ``trainer.precision=bf16-mixed`` gets a whole Lightning update on the task's batches:
embedding, recurrence, decoder, loss, backward, gradient clipping, optimizer. This
script runs short fits of real configs (``mode=fit``, no validation) through ``train.py``, each in
a fresh process, and times every update with ``callbacks=[step_timer]``
(`treernn.callbacks.step_timer.StepTimer`; on a GPU synchronised at both ends). The two
precisions run in turns, one fit of each per round, with the same seed and so the same batches, so
that a change in the machine's load hits both alike. Each fit gives the median of its updates
after a warm-up; a case's figure is the median of its rounds, with the slowest and fastest round
beside it, and bf16 / fp32 is the speed ratio taken within each round.

    python scripts/benchmark_training.py          # onlstm, om-logic, 5 rounds
    python scripts/benchmark_training.py --cases onlstm-paper,om-logic-paper --device cuda
    python scripts/benchmark_training.py --cases onlstm -- model.chunk_size=5   # extra overrides

Data: ``TREERNN_DATA_DIR`` (as for ``train.py``). Each fit's run directory (its ``train.log`` and
``step_times.json``) is kept under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from treernn.lifecycle import records

REPO_ROOT = Path(__file__).resolve().parents[1]

#: name -> (what it is, train.py overrides)
CASES: dict[str, tuple[str, list[str]]] = {
    "onlstm": ("ON-LSTM LM, the main job (task=ptb model=onlstm)", ["task=ptb", "model=onlstm"]),
    "lstm": ("LSTM LM, the main job's size (task=ptb model=lstm)", ["task=ptb", "model=lstm"]),
    "om-logic": (
        "Ordered Memory, logic, small preset",
        ["experiment=om/ordered_memory_logic_small"],
    ),
    "onlstm-paper": ("ON-LSTM LM, paper size", ["experiment=onlstm/onlstm_ptb"]),
    "lstm-paper": ("AWD-LSTM LM, paper size", ["experiment=onlstm/lstm_ptb"]),
    "om-logic-paper": ("Ordered Memory, logic, paper size", ["experiment=om/ordered_memory_logic"]),
    "ld-treelstm": (
        "LdTreeLSTM, UD English-EWT, small preset",
        ["experiment=tdlstm/ld_treelstm_ewt_small"],
    ),
    "tree-lstm-listops": (
        "Tree-LSTM on gold trees, ListOps, small preset",
        ["experiment=om/tree_lstm_listops_small"],
    ),
    "transformer-listops": (
        "Transformer, the ListOps preset on a generated stand-in",
        ["experiment=om/transformer_listops", "task.datamodule.train_source=generate"],
    ),
}
PRECISIONS = ("32-true", "bf16-mixed")


def fit_command(args: argparse.Namespace, case: str, precision: str, run_dir: Path) -> list[str]:
    """``train.py`` for one timed fit: no validation, no checkpoint callback, no progress bar."""
    trainer = ["trainer=gpu", "trainer.devices=1"] if args.device == "cuda" else []
    return [
        sys.executable,
        str(REPO_ROOT / "train.py"),
        *CASES[case][1],
        *trainer,
        "mode=fit",
        f"trainer.precision={precision}",
        f"trainer.max_steps={args.steps}",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "callbacks=[step_timer]",
        f"callbacks.step_timer.warmup={args.warmup}",
        f"hydra.run.dir={run_dir}",
        *args.overrides,
    ]


def run_fit(args: argparse.Namespace, case: str, precision: str, run_dir: Path) -> dict:
    """One fit; its step_times.json. A failed fit stops the benchmark with its output's end."""
    command = fit_command(args, case, precision, run_dir)
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    record = run_dir / "step_times.json"
    if done.returncode != 0 or not record.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise SystemExit(
            f"{' '.join(command[1:])}\nexited {done.returncode} without {record}:\n{tail}"
        )
    return json.loads(record.read_text())


def spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def report(args: argparse.Namespace, results: dict[tuple[str, str], list[dict]]) -> None:
    print(
        f"\n{'case':16s} {'precision':11s} {'ms/update':>10s} {'rounds':>14s}  "
        f"{'bf16/fp32 speed (rounds)':s}"
    )
    for case in args.cases:
        medians = {p: [r["summary"]["median_ms"] for r in results[case, p]] for p in PRECISIONS}
        speed = [fp32 / bf16 for fp32, bf16 in zip(medians["32-true"], medians["bf16-mixed"])]
        for precision in PRECISIONS:
            ratio = ""
            if precision == "bf16-mixed":
                rounds = " ".join(f"{value:.2f}" for value in speed)
                ratio = f"{statistics.median(speed):.2f}x ({rounds})"
            print(
                f"{case:16s} {precision:11s} {statistics.median(medians[precision]):10.1f} "
                f"{spread(medians[precision]):>14s}  {ratio}"
            )
    print("\nUnder bf16-mixed, treernn's products (the probes' choices in each case's first fit):")
    for case in args.cases:
        products = results[case, "bf16-mixed"][0]["products"]
        for model, product, shape, dtype in products:
            print(f"  {case:16s} {model:14s} {product:40s} {shape:28s} {dtype}")
        if not products:
            print(f"  {case:16s} none (plain torch modules follow autocast)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", default="onlstm,om-logic", help=f"comma list of {', '.join(CASES)}"
    )
    parser.add_argument("--rounds", type=int, default=5, help="fits per case and precision")
    parser.add_argument("--steps", type=int, default=40, help="updates per fit")
    parser.add_argument("--warmup", type=int, default=10, help="leading updates not summarised")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--out", type=Path, help="run directories (default outputs/benchmark_training/<time>)"
    )
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every fit (after --)")
    args = parser.parse_args(argv)
    args.cases = args.cases.split(",")
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.rounds < 1 or args.steps <= args.warmup or args.warmup < 0:
        parser.error("need --rounds >= 1 and 0 <= --warmup < --steps")
    out = args.out or REPO_ROOT / "outputs" / "benchmark_training" / time.strftime("%Y%m%d-%H%M%S")

    started = time.perf_counter()
    one, five, _ = os.getloadavg()
    print(json.dumps(records.machine()))
    print(f"load average {one:.2f} {five:.2f} on {os.cpu_count()} CPUs; run directories in {out}")
    for case in args.cases:
        print(f"{case}: {CASES[case][0]}: {' '.join(CASES[case][1] + args.overrides)}")
    print(f"{args.rounds} rounds of one fit per precision, {args.steps} updates each, the first "
          f"{args.warmup} not summarised")  # fmt: skip
    results: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        for case in args.cases:
            for precision in PRECISIONS:
                record = run_fit(args, case, precision, out / case / f"{precision}-{round_}")
                results.setdefault((case, precision), []).append(record)
                summary = record["summary"]
                print(
                    f"round {round_ + 1} {case:16s} {precision:11s} "
                    f"{summary['median_ms']:8.1f} ms/update (p10-p90 "
                    f"{summary['p10_ms']:.1f}-{summary['p90_ms']:.1f})",
                    flush=True,
                )
    report(args, results)
    one, five, _ = os.getloadavg()
    print(f"\ndone in {time.perf_counter() - started:.0f} s, load average {one:.2f} {five:.2f}")


if __name__ == "__main__":
    main()
