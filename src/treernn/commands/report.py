"""Results a researcher reads at a glance: the papers' comparison tables from a sweep, per-length
accuracy tables, the systematic-generalisation table, and a plot like ON-LSTM's Fig. 3 (test
accuracy against number of operators, one line per model, trained on <= 6 operators).

One table per sweep, beside the papers' numbers (Ordered Memory Tables 1 and 3 and Fig. 3a,
ON-LSTM Tables 1 and 2), from a multirun directory or any run directories of one task:

    python -m treernn report table outputs/multirun/logic/ordered_memory/<time> [--out PREFIX]
        [--paper auto|logic|sysgen|listops|sst2|sst5|parsing|ptb|none] [--wandb]

Rows are the runs grouped by the overrides that differ between them (seed aside; for the logic
partitions, ``task.datamodule.split`` gives the A/B/C columns instead), with n = the number of
runs; each cell is mean ± sample std (max) over the row's runs, a single run's value alone. The
columns are the task's test metrics: accuracy per number of operators and its 7-12 mean,
partitions A/B/C, accuracy per length bucket and overall, induced-tree F1 per layer (trivial
trees as rows when ``report tree-f1`` / ``parse`` wrote them into a run), perplexity. The
papers' rows are marked "(paper)" (numbers in `treernn.reporting.paper`). Writes
``PREFIX.md``, ``PREFIX.csv`` (mean/std/max/n per column) and, for accuracy by operators,
``PREFIX.png`` (mean with std error bars per model, trained lengths shaded); the default PREFIX
is ``<dir>/table`` (the common parent of several directories). Runs that did not finish are left
out and listed. With ``--wandb`` (or when the runs logged to wandb) the table also goes to a wandb
run's summary as a ``wandb.Table`` (offline unless ``WANDB_MODE`` says otherwise). A multirun
writes this table into its sweep directory when it ends (`treernn.lifecycle.sweeps.summary`).

`AccuracyReport <treernn.callbacks.accuracy_report.AccuracyReport>` (a callback, in
``conf/task/{logic,listops}.yaml``) prints the tables after testing and writes
``test_results.json`` and ``accuracy_by_length.png`` into the run directory (and to wandb when a
wandb logger is attached). To compare runs in one figure:

    python -m treernn report accuracy outputs/logic/*/*/test_results.json --out fig3.png

Every claim of the three papers and Hu et al. 2020's SyntaxGym comparison (eleven claims),
each decided over seeds from the table sweeps given by the claims rule of ``docs/claims.md``
(`treernn.reporting.claims`): each difference with its interval, effect size, power and Holm's
correction across the report; planned where its plan was committed before the sweep's jobs
started, else post hoc; claims whose table has no sweep given say "no run":

    python -m treernn report claims outputs/tables/logic/<sweep> outputs/tables/listops/<sweep> ...

Induced trees of a trained ON-LSTM against the gold trees (parse F1 per layer, beside the
left-branching, right-branching, balanced and random trees), as `TreeF1Callback
<treernn.callbacks.tree_f1.TreeF1Callback>` logs them during training:

    python -m treernn report tree-f1 --ckpt outputs/logic/onlstm/<run>/checkpoints/last.ckpt

Training throughput of an encoder per length bucket (tokens the model reads per second of a
forward and backward pass, on test examples of each bucket), for any ``train.py`` overrides:

    python -m treernn report throughput experiment=onlstm/onlstm_logic_small
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from treernn.lifecycle.records import read_json_object
from treernn.parsing.trees import BRACKET_DISTANCES
from treernn.reporting.accuracy import (
    accuracy_table,
    length_curve,
    plot_accuracy_by_length,
    sysgen_table,
)
from treernn.reporting.tree_f1 import format_tree_f1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.reporting.table import PAPER_CHOICES

    reports = parser.add_subparsers(dest="report", required=True, metavar="<report>")
    table = reports.add_parser(
        "table",
        help="the papers' comparison table of a sweep: mean ± std (max) over seeds per model",
        description="One table of a multirun's (or several runs') test metrics, one row per "
        "setting (the overrides that differ, seed aside), beside the papers' numbers; writes "
        "PREFIX.md, PREFIX.csv and, for accuracy by number of operators, PREFIX.png.",
    )
    table.add_argument("runs", nargs="+", type=Path, help="a multirun directory or run directories")
    table.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="PREFIX",
        help="PREFIX.md/.csv/.png (default: <dir>/table, or in the directories' common parent)",
    )
    table.add_argument(
        "--paper",
        default="auto",
        choices=PAPER_CHOICES,
        help="whose numbers go beside the runs (auto: by the runs' task)",
    )
    table.add_argument(
        "--wandb", action="store_true", help="log the table to wandb (offline without WANDB_MODE)"
    )
    table.set_defaults(run_report=table_report)

    curves = reports.add_parser(
        "curves",
        help="learning curves of a sweep: a validation metric by update, mean ± std over seeds",
        description="A validation metric by update from the runs' csv logger files, one row per "
        "setting as in `report table` (a systematic-generalisation partition is a row of its "
        "own); writes PREFIX.md and PREFIX.png.",
    )
    curves.add_argument(
        "runs", nargs="+", type=Path, help="a multirun directory or run directories"
    )
    curves.add_argument(
        "--metric", default="auto", help="a csv logger column (auto: val/acc, val/ppl or val/loss)"
    )
    curves.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="PREFIX",
        help="PREFIX.md/.png (default: <dir>/curves, or in the directories' common parent)",
    )
    curves.set_defaults(run_report=curves_report)

    claims = reports.add_parser(
        "claims",
        help="the papers' claims, each decided over seeds from table sweeps",
        description="For each comparison a papers' table names (ON-LSTM, Ordered Memory, Top-down "
        "Tree LSTM; Hu et al. 2020's SyntaxGym comparison): the two means over seeds, the "
        "difference with its 95%% interval, Hedges' g, P(A>B) over seeds, the p-value adjusted "
        "with Holm's method across the report, the power at the observed spread and the seeds a "
        "decision would need; one word (shown, not shown, equivalent, undecided, incomplete, "
        "smoke check), planned where a plan in results/plans/ was committed before every job of "
        "its sweep started, else post hoc; see docs/claims.md. Claims whose table has no sweep "
        "given say 'no run'.",
    )
    claims.add_argument(
        "sweeps", nargs="*", type=Path, help="table sweep directories (train.py -m table=<name>)"
    )
    claims.add_argument("--out", type=Path, default=None, help="also write the table here (.md)")
    claims.add_argument(
        "--plans", type=Path, default=None, help="the plans' folder (default: results/plans)"
    )
    claims.set_defaults(run_report=claims_report)

    plan = reports.add_parser(
        "plan",
        help="a claim's plan from a power analysis at the spread of kept sweeps",
        description="Writes results/plans/claim-<NN>.yaml (or --out): the claim's table, budget, "
        "seeds a side (the fewest that give --power to detect --effect, or to show equivalence "
        "within a --margin, at alpha over the report's comparisons: Holm's strictest step), the "
        "spread they were computed from (--spread-from: kept sweeps of the claim's table), the "
        "sweep's command and its cost in CPU core-hours from the kept runs' timings. Commit the "
        "plan before running its sweep: only then are its verdicts planned.",
    )
    plan.add_argument("--claim", type=int, required=True, help="the claim's number in the report")
    plan.add_argument("--table", default=None, help="the table (default: the claim's first)")
    plan.add_argument("--sweep", required=True, help="the planned sweep's name (sweep_id)")
    plan.add_argument("--budget", required=True, help="trainer.max_steps=N or trainer.max_epochs=N")
    plan.add_argument(
        "--effect",
        action="append",
        default=[],
        metavar="[INDEX=]EFFECT",
        help="the smallest effect of interest, of every comparison decided or of the one at INDEX "
        "(from 0; comparisons of other metrics need their own)",
    )
    plan.add_argument(
        "--margin",
        action="append",
        default=[],
        metavar="INDEX=MARGIN",
        help="an equivalence margin for the claim's comparison INDEX (from 0)",
    )
    plan.add_argument(
        "--comparisons", default=None, help="the comparisons it decides, e.g. 0,2 (default: all)"
    )
    plan.add_argument("--power", type=float, default=0.8)
    plan.add_argument("--alpha", type=float, default=0.05)
    plan.add_argument("--first-seed", type=int, default=101, help="seeds run: from this one")
    plan.add_argument(
        "--seeds", type=int, default=None, help="seeds a side (default: the power analysis's)"
    )
    plan.add_argument(
        "--spread-from",
        nargs="+",
        type=Path,
        required=True,
        help="kept sweeps of the claim's table",
    )
    plan.add_argument(
        "--sd",
        default=None,
        metavar="A,B",
        help="the two sides' standard deviations, where no kept sweep has the metric (with "
        "--sd-source); --spread-from then gives the runs' timings only",
    )
    plan.add_argument("--sd-source", default="", help="where --sd comes from")
    plan.add_argument(
        "--override", action="append", default=[], help="another override of the sweep's command"
    )
    plan.add_argument("--no-run", action="store_true", help="a plan that says what it would need")
    plan.add_argument(
        "--pool-kept",
        action="store_true",
        help="decide from the planned sweep read together with kept sweeps of the same terms "
        "(their jobs started earlier: the verdict is post hoc, said so)",
    )
    plan.add_argument("--needs", default="", help="what a plan not run here would need")
    plan.add_argument("--why", default="", help="why this plan, in a sentence")
    plan.add_argument("--out", type=Path, default=None, help="default: results/plans/claim-NN.yaml")
    plan.set_defaults(run_report=plan_report)

    pages = reports.add_parser(
        "pages",
        help="the docs' results pages and the README's claims excerpt, from results/",
        description="Writes docs/results/ (the claims table and a page per complete kept sweep: "
        "its table, learning curves and figures) and the README's claims excerpt between its "
        "markers (treernn.reporting.pages). Incomplete sweeps are left out.",
    )
    pages.add_argument("--results", type=Path, default=Path("results"), help="the kept sweeps")
    pages.add_argument("--docs", type=Path, default=Path("docs"), help="the docs folder")
    pages.add_argument("--readme", type=Path, default=Path("README.md"))
    pages.add_argument(
        "--check",
        action="store_true",
        help="write nothing; fail naming the files that differ from what would be written",
    )
    pages.set_defaults(run_report=pages_report)

    accuracy = reports.add_parser(
        "accuracy",
        help="per-length accuracy tables of runs and a Fig. 3-style plot",
        description="Tables of several runs' test accuracy by length (and the systematic-"
        "generalisation table), and one plot of them all (ON-LSTM Fig. 3).",
    )
    accuracy.add_argument("results", nargs="+", type=Path, help="test_results.json files")
    accuracy.add_argument("--out", type=Path, default=Path("accuracy_by_length.png"))
    accuracy.add_argument("--no-paper", action="store_true", help="leave out the papers' numbers")
    accuracy.set_defaults(run_report=accuracy_report)

    tree_f1 = reports.add_parser(
        "tree-f1",
        help="parse F1 of a logic/ListOps checkpoint's induced trees, per layer",
        description="Parse F1 of a classification checkpoint's induced trees (ON-LSTM distances "
        "or Ordered Memory attention) against the gold trees, per layer and for the trivial-tree "
        "baselines.",
    )
    tree_f1.add_argument("--ckpt", required=True, type=Path)
    tree_f1.add_argument("--split", default="test", choices=["val", "test"])
    tree_f1.add_argument("--data-dir", type=Path, default=None, help="replaces the run's data_dir")
    tree_f1.add_argument("--bracket-distances", default="drop", choices=list(BRACKET_DISTANCES))
    tree_f1.add_argument("--batch-size", type=int, default=None)
    tree_f1.add_argument("--max-sentences", type=int, default=None)
    tree_f1.add_argument("--examples", type=int, default=3, help="induced trees to print")
    tree_f1.add_argument("--out", type=Path, default=None, help="json (default: beside the run)")
    tree_f1.set_defaults(run_report=tree_f1_report)

    throughput = reports.add_parser(
        "throughput",
        help="training throughput per length bucket for train.py overrides",
        description="Training throughput per length bucket of the model that `python train.py "
        "OVERRIDES` builds (run from the repository root).",
    )
    throughput.add_argument("overrides", nargs="*", help="train.py overrides, e.g. task=logic")
    throughput.add_argument("--max-examples", type=int, default=256, help="per bucket")
    throughput.add_argument("--batch-size", type=int, default=64)
    throughput.add_argument("--config-dir", type=Path, default=Path("conf"))
    throughput.set_defaults(run_report=throughput_report)


def run(args: argparse.Namespace) -> int:
    return args.run_report(args)


def tree_f1_report(args: argparse.Namespace) -> int:
    from treernn.evaluation.tree_f1 import tree_f1_from_checkpoint

    result = tree_f1_from_checkpoint(
        args.ckpt,
        args.split,
        args.data_dir,
        args.bracket_distances,
        args.batch_size,
        args.max_sentences,
        args.examples,
    )
    title = f"induced trees vs gold trees ({args.split}, {args.ckpt})"
    print(format_tree_f1({**result["layers"], **result["baselines"]}, title))
    for example in result["examples"]:
        print("\n" + "\n".join(f"  {name:<8} {tree}" for name, tree in example.items()))
    # the loading ladder also takes a run directory: the result goes beside the run either way
    where = args.ckpt.resolve()
    run_dir = where.parent.parent if where.is_file() else where
    out = args.out or run_dir / f"tree_f1_{args.split}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


def throughput_report(args: argparse.Namespace) -> int:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from treernn.checkpoints import build_task
    from treernn.datamodules import prepared_datamodule
    from treernn.evaluation.throughput import encoder_throughput
    from treernn.lifecycle.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(str(args.config_dir.resolve()), version_base="1.3"):
        cfg = compose("config", overrides=args.overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as under train.py: a model's default name resolves
    with open_dict(cfg):
        del cfg["hydra"]
    datamodule = prepared_datamodule(cfg.task.datamodule, "test")
    task = build_task(cfg, datamodule.task_kwargs())
    results = encoder_throughput(
        task,
        datamodule.splits["test"],
        datamodule.vocab.pad_index,
        datamodule.bucket_names,
        args.max_examples,
        args.batch_size,
    )
    print(f"throughput of {cfg.model.name} ({' '.join(args.overrides)}), forward + backward:")
    print(f"{'bucket':<12}{'examples':>10}{'tokens':>10}{'tokens/cpu-s':>14}{'tokens/s':>12}")
    for bucket, row in results.items():
        print(
            f"{bucket:<12}{row['examples']:>10}{row['tokens']:>10}"
            f"{row['tokens_per_cpu_s']:>14.0f}{row['tokens_per_s']:>12.0f}"
        )
    return 0


#: what to do about a damaged ``test_results.json``
ACCURACY_TODO = "test the run again (python train.py mode=test ckpt_path=<its checkpoint> ...)"


def accuracy_report(args: argparse.Namespace) -> int:
    curves = {}
    sysgen: dict[str, dict[str, float]] = {}
    for path in args.results:
        data = read_json_object(path, ACCURACY_TODO)
        label = data.get("label", path.parent.name)
        if label in curves:
            label = f"{label} ({path.parent.name})"
        curves[label] = length_curve(data["results"])
        print(accuracy_table(data["results"], title=f"{label}: {path}") + "\n")
        for group, summary in data["results"].items():
            if group.startswith("sysgen_"):
                sysgen.setdefault(label, {})[group.removeprefix("sysgen_")] = 100 * summary["acc"]
    if sysgen:
        print(sysgen_table(sysgen) + "\n")
    print(f"wrote {plot_accuracy_by_length(curves, args.out, with_paper=not args.no_paper)}")
    return 0


def default_prefix(paths: Sequence[Path], name: str = "table") -> Path:
    """``<dir>/<name>`` for one directory, else in the directories' common parent."""
    import os

    if len(paths) == 1:
        return paths[0] / name
    return Path(os.path.commonpath([path.resolve() for path in paths])) / name


def curves_report(args: argparse.Namespace) -> int:
    from treernn.reporting.curves import learning_curves, to_markdown, write_curves

    curves = learning_curves(args.runs, args.metric)
    print(to_markdown(curves), end="")
    for path in write_curves(curves, args.out or default_prefix(args.runs, "curves")):
        print(f"wrote {path}")
    return 0


def _importable(name: str) -> bool:
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def table_report(args: argparse.Namespace) -> int:
    from treernn.reporting.table import report_table
    from treernn.reporting.table_output import to_markdown, write_table
    from treernn.reporting.table_wandb import log_to_wandb

    table = report_table(args.runs, args.paper)
    print(to_markdown(table), end="")
    prefix = args.out or default_prefix(args.runs)
    for path in write_table(table, prefix):
        print(f"wrote {path}")
    if args.wandb or (table.wandb_project and _importable("wandb")):
        where = log_to_wandb(table, prefix.parent, table.wandb_project or "treernn")
        print(f"logged the table to wandb ({where})")
    return 0


def pages_report(args: argparse.Namespace) -> int:
    from treernn.commands import command_parsers
    from treernn.errors import UserError
    from treernn.reporting.pages import planned_pages, stale_pages, write_pages

    # the commands page names the console script, however this command was run
    files = planned_pages(args.results, args.docs, args.readme, command_parsers("treernn"))
    if args.check:
        stale = stale_pages(files, args.docs)
        if stale:
            raise UserError(
                f"{len(stale)} results file(s) differ from the kept runs ("
                + ", ".join(map(str, stale[:5]))
                + (", ..." if len(stale) > 5 else "")
                + "): run `python -m treernn report pages` and commit what it writes"
            )
        print(f"{len(files)} results files match the kept runs")
        return 0
    for path in write_pages(files):
        print(f"wrote {path}")
    return 0


def claims_report(args: argparse.Namespace) -> int:
    from treernn.reporting.claims.plans import load_plans
    from treernn.reporting.claims.render import reading_notes, to_markdown
    from treernn.reporting.claims.rule import decide_claims
    from treernn.reporting.claims.sweeps import load_sweeps

    notes: list[str] = []
    sweeps = load_sweeps(args.sweeps, notes)
    plans = load_plans(args.plans)
    decided = decide_claims(sweeps, plans=plans)
    notes += reading_notes(decided, sweeps)
    text = to_markdown(decided, machines=True, plans=plans)
    if notes:
        text += "".join(f"{note}.\n" for note in notes)
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


def _effects(args: argparse.Namespace) -> dict[int, float]:
    from treernn.errors import ConfigValueError
    from treernn.reporting.claims.catalogue import CLAIMS

    count = len(CLAIMS[args.claim - 1].comparisons) if 1 <= args.claim <= len(CLAIMS) else 0
    effects: dict[int, float] = {}
    for item in args.effect:
        index, _, value = item.rpartition("=")
        try:
            if index:
                effects[int(index)] = float(value)
            else:
                effects.update({position: float(value) for position in range(count)})
        except ValueError:
            raise ConfigValueError(f"--effect {item}: give EFFECT or INDEX=EFFECT") from None
    return effects


def _spread(args: argparse.Namespace) -> tuple[float, float, str] | None:
    from treernn.errors import ConfigValueError

    if args.sd is None:
        return None
    try:
        sd_a, sd_b = (float(part) for part in args.sd.split(","))
    except ValueError:
        raise ConfigValueError(f"--sd {args.sd}: give two numbers, A,B") from None
    if not args.sd_source:
        raise ConfigValueError("--sd: say where the spread comes from (--sd-source)")
    return sd_a, sd_b, args.sd_source


def plan_report(args: argparse.Namespace) -> int:
    from treernn.errors import ConfigValueError
    from treernn.reporting.claims.plans import PLANS_DIR, write_plan

    margins = {}
    for item in args.margin:
        index, _, margin = item.partition("=")
        try:
            margins[int(index)] = float(margin)
        except ValueError:
            raise ConfigValueError(f"--margin {item}: give INDEX=MARGIN, e.g. 0=2.5") from None
    key, _, value = args.budget.partition("=")
    if key not in ("trainer.max_steps", "trainer.max_epochs") or not value.isdigit():
        raise ConfigValueError(
            f"--budget {args.budget}: give trainer.max_steps=N or trainer.max_epochs=N"
        )
    comparisons = (
        None if args.comparisons is None else [int(i) for i in args.comparisons.split(",")]
    )
    text = write_plan(
        claim=args.claim,
        table=args.table,
        sweep=args.sweep,
        budget=(key.removeprefix("trainer."), int(value)),
        effects=_effects(args),
        margins=margins,
        comparisons=comparisons,
        power=args.power,
        alpha=args.alpha,
        first_seed=args.first_seed,
        seeds=args.seeds,
        spread_from=args.spread_from,
        spread=_spread(args),
        overrides=args.override,
        run=not args.no_run,
        pool_kept=args.pool_kept,
        needs=args.needs,
        why=args.why,
    )
    out = args.out or PLANS_DIR / f"claim-{args.claim:02d}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text, end="")
    print(f"wrote {out}; commit it before the sweep starts")
    return 0
