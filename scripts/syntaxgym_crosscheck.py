"""``python -m treernn syntaxgym`` checked against the ``syntaxgym`` package's own code, item by
item: the package (0.6.0: its ``Suite``, its region alignment in ``suite.py``, its region
aggregation and its predictions) is run on what ``python -m treernn lmzoo`` writes for the same
model (``spec``, ``tokenize``, ``unkify``, ``get-surprisals``), as it runs on an LM-Zoo image's.

    python scripts/syntaxgym_crosscheck.py --ckpt CKPT_OR_DIR \\
        --syntaxgym-python /tmp/sgvenv/bin/python [SUITE.json|FOLDER ...] [--unk] [--work DIR]

Suites: files or folders (default: Hu et al.'s 34 from ``$TREERNN_DATA_DIR/syntaxgym/suites``).
For each suite:

1. the package writes the suite's sentences (its ``get_sentences``), which must equal treernn's;
2. ``python -m treernn lmzoo spec|tokenize|unkify|get-surprisals`` read that sentence file
   (``--unk``: unknown words written ``<unk>``, as LM-Zoo's ON-LSTM image writes them);
3. ``python -m treernn syntaxgym --items`` scores the suite;
4. the package aligns the tokens with the regions (``aggregate_surprisals``), combines them and
   evaluates the predictions (``Suite.evaluate_predictions``);
5. every prediction of every item, and every region's value, is compared (kernel probes off,
   ``TREERNN_PROBE_SECONDS=0`` unless set, so that every call reads with the same kernels).

It prints one line per suite and exits 1 when a prediction or a region's value differs, save
where ``--unk`` writes a run of consecutive ``<unk>`` tokens across a region boundary: the
package cannot tell where such a run splits and puts it into its leftmost region (its
"Consecutive OOVs found" warning; a run that only ``<eos>`` follows takes the ``<eos>`` too),
which the summary counts apart. The package needs Python
3.10 or older (it imports ``inspect.getargspec``) and pandas; it installs without its pinned
dependencies beside pyparsing 2.4:

    python3.10 -m venv /tmp/sgvenv
    /tmp/sgvenv/bin/pip install --no-deps syntaxgym==0.6.0 lm-zoo==1.2.3
    /tmp/sgvenv/bin/pip install 'pyparsing<3' pandas h5py requests docker tqdm spython

(``lm-zoo``, ``docker`` and the rest only because ``syntaxgym/__init__.py`` imports them; the
check never starts a container.) Two rewrites make Hu et al.'s published suites readable by
0.6.0, and change nothing they mean: its grammar groups with round brackets only, so the
suites' square brackets are written round; its ``Region`` refuses a content with spaces at either
end, so those are stripped (its own sentence writer strips the leading ones too).

The same file is the package's side of the check (``--package-side``), run with
``--syntaxgym-python``; that side imports nothing from treernn.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


# ----------------------------------------------------------------------------- the package's side
def package_suite(data: dict, strip: bool = True) -> dict:
    """A published suite as syntaxgym 0.6.0 reads it (module docstring: brackets; spaces, which
    its sentence writer keeps where they end a region)."""
    data = json.loads(json.dumps(data))
    for prediction in data["predictions"]:
        prediction["formula"] = prediction["formula"].replace("[", "(").replace("]", ")")
    for item in data["items"] if strip else ():
        for condition in item["conditions"]:
            for region in condition["regions"]:
                region["content"] = region["content"].strip()
    return data


def package_sentences(jobs: list[dict]) -> None:
    """Step 1: each job's suite's sentences, as the package writes them, into its file."""
    from syntaxgym.get_sentences import get_sentences
    from syntaxgym.suite import Suite

    for job in jobs:
        data = json.loads(Path(job["suite"]).read_text())
        sentences = get_sentences(Suite.from_dict(package_suite(data, strip=False)))
        Path(job["sentences"]).write_text("".join(s + "\n" for s in sentences))


def package_results(jobs: list[dict]) -> None:
    """Step 4: the package's per-item results and region values from the lmzoo outputs."""
    import warnings

    import pandas as pd
    from syntaxgym.agg_surprisals import aggregate_surprisals
    from syntaxgym.suite import Suite

    for job in jobs:
        folder = Path(job["folder"])
        suite = Suite.from_dict(package_suite(json.loads(Path(job["suite"]).read_text())))
        spec = json.loads((folder / "spec.json").read_text())
        # as syntaxgym.utils reads the tokenize and unkify outputs
        lines = (folder / "tokens.txt").read_text().strip("\n").split("\n")
        tokens = [line.strip().split(" ") for line in lines]
        masks = [m for m in (folder / "unks.txt").read_text().strip("\n").split("\n") if m]
        unks = [[int(u) for u in mask.split(" ")] for mask in masks]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its OOV warnings and pandas' deprecations
            surprisals = pd.read_csv(folder / "surprisals.tsv", delim_whitespace=True)
            evaluated = aggregate_surprisals(surprisals, tokens, unks, suite, spec)
            results = evaluated.evaluate_predictions()
        items = {}
        for item in evaluated.items:
            predictions = sorted(results[item["item_number"]].items(), key=lambda kv: kv[0].idx)
            items[str(item["item_number"])] = {
                "predictions": [bool(value) for _, value in predictions],
                "regions": {
                    condition["condition_name"]: [
                        float(region["metric_value"][evaluated.meta["metric"]])
                        for region in condition["regions"]
                    ]
                    for condition in item["conditions"]
                },
            }
        (folder / "package.json").write_text(json.dumps(items))


# ----------------------------------------------------------------------------- treernn's side
def treernn(*args: str) -> None:
    """``python -m treernn <args>``, in this process (its printed tables left out)."""
    import contextlib
    import io

    from treernn.commands import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            status = main(list(args))
        except SystemExit as exit:  # argparse's refusal: its message was printed above
            status = exit.code
    if status:
        raise SystemExit(
            f"python -m treernn {' '.join(args)} exited {status}:\n{printed.getvalue()}"
        )


def unk_runs_across_regions(regions: list[dict]) -> set[int]:
    """The regions (their indices) spanned by a run of consecutive ``<unk>`` tokens that crosses
    a region boundary. The package cannot tell where such a run splits, since no word of it
    matches the regions' text: it puts the whole run into the leftmost region it touches (the
    "Consecutive OOVs found" warning of its ``suite.py``), where treernn, which tokenises each
    region itself, keeps each token in its own region. The package ends a run at the next token
    it finds in the text, and ``<eos>`` is in no region's text: a run that only ``<eos>``
    follows takes it into the run's region too."""
    flat = [(index, token) for index, region in enumerate(regions) for token in region["tokens"]]
    spanned: set[int] = set()
    run: list[int] = []
    for index, token in [*flat, (-1, "")]:
        if token == "<unk>" or (token == "<eos>" and run):
            run.append(index)
            continue
        if len(set(run)) > 1:
            spanned.update(range(run[0], run[-1] + 1))
        run = []
    return spanned


@dataclasses.dataclass
class Differences:
    """What one suite's comparison counted (or several suites', added up)."""

    items: int = 0
    regions: int = 0
    items_differ: int = 0
    values_differ: int = 0
    # of those, the ones inside a run of <unk> tokens across a region boundary
    items_at_unk_runs: int = 0
    values_at_unk_runs: int = 0
    examples: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: Differences) -> None:
        for field in dataclasses.fields(self):
            if field.name != "examples":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    @property
    def unexplained(self) -> int:
        return (self.items_differ - self.items_at_unk_runs) + (
            self.values_differ - self.values_at_unk_runs
        )


def compare(folder: Path, suite_name: str) -> Differences:
    """Each item's predictions and each region's value, treernn's against the package's."""
    package = json.loads((folder / "package.json").read_text())
    ours = json.loads((folder / "syntaxgym.json").read_text())["suites"][0]
    found = Differences()
    for item in ours["item_results"]:
        theirs = package[str(item["item_number"])]
        found.items += 1
        item_differs = item["predictions"] != theirs["predictions"]
        # an item counts as explained only where every value that moved lies in such a run
        at_runs = elsewhere = 0
        for condition, condition_regions in item["regions"].items():
            at_unk_runs = unk_runs_across_regions(condition_regions)
            package_values = theirs["regions"][condition]
            # where the package only moved tokens between the regions such runs span, a sum
            # over those regions is the same on both sides (checked for `sum` suites)
            moved_within_runs = ours["metric"] != "sum" or math.isclose(
                sum(condition_regions[index]["value"] or 0.0 for index in at_unk_runs),
                sum(package_values[index] for index in at_unk_runs),
                rel_tol=1e-9,
            )
            for index, (region, value) in enumerate(zip(condition_regions, package_values)):
                found.regions += 1
                ours_value = region["value"]
                # pandas' default float parser, which the package reads the table with, is not
                # round-trip exact: it may move the last digit of what treernn wrote
                same = (ours_value is None and value != value) or (
                    ours_value is not None and math.isclose(ours_value, value, rel_tol=1e-12)
                )
                if same:
                    continue
                found.values_differ += 1
                if index in at_unk_runs and moved_within_runs:
                    found.values_at_unk_runs += 1
                    at_runs += 1
                else:
                    elsewhere += 1
                if len(found.examples) < 20:
                    found.examples.append(
                        f"{suite_name} item {item['item_number']} {condition} region "
                        f"{region['region_number']}: treernn {ours_value} "
                        f"{region['tokens']}, syntaxgym {value}"
                    )
        if item_differs:
            found.items_differ += 1
            found.items_at_unk_runs += bool(at_runs and not elsewhere)
            found.examples.insert(
                0,
                f"{suite_name} item {item['item_number']}: treernn {item['predictions']}, "
                f"syntaxgym {theirs['predictions']}",
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="suites (default: Hu et al.'s 34)")
    parser.add_argument("--ckpt", help="a language model: checkpoint, run or export")
    parser.add_argument("--syntaxgym-python", help="a Python that imports syntaxgym 0.6.0")
    parser.add_argument("--unk", action="store_true", help="lmzoo writes unknown words as <unk>")
    parser.add_argument(
        "--work", default=None, help="folder for the files (default: a temporary one)"
    )
    parser.add_argument("--package-side", choices=("sentences", "results"), help=argparse.SUPPRESS)
    parser.add_argument("--jobs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.package_side:
        jobs = json.loads(Path(args.jobs).read_text())
        (package_sentences if args.package_side == "sentences" else package_results)(jobs)
        return 0
    if not args.ckpt or not args.syntaxgym_python:
        parser.error("--ckpt and --syntaxgym-python are needed")
    import os
    import tempfile
    import time

    from treernn.evaluation.syntaxgym import read_suites

    # every call in this process uses the kernels already chosen or their defaults: a probe
    # that runs out of time is not kept and may pick another kernel for the next call, which
    # moves a surprisal in its 7th digit
    os.environ.setdefault("TREERNN_PROBE_SECONDS", "0")

    work = Path(args.work or tempfile.mkdtemp(prefix="syntaxgym_crosscheck_"))
    suites = read_suites(args.paths)
    jobs = []
    for suite in suites:
        folder = work / suite.name
        folder.mkdir(parents=True, exist_ok=True)
        job = {
            "suite": suite.source,
            "folder": str(folder),
            "sentences": str(folder / "sentences.txt"),
        }
        jobs.append(job)
    (work / "jobs.json").write_text(json.dumps(jobs))

    def package_side(step: str) -> None:
        command = [args.syntaxgym_python, str(SCRIPT), "--package-side", step, "--jobs"]
        subprocess.run([*command, str(work / "jobs.json")], check=True)

    start = time.perf_counter()
    package_side("sentences")
    unk = ["--unk"] if args.unk else []
    common = ["--ckpt", args.ckpt, "--force", "--device", "cpu"]
    for suite, job in zip(suites, jobs):
        folder = Path(job["folder"])
        written = Path(job["sentences"]).read_text().split("\n")[:-1]
        if written != suite.sentences():
            print(f"{suite.name}: the package's sentences differ from treernn's", file=sys.stderr)
            return 1
        treernn("lmzoo", "spec", *common, "--out", str(folder / "spec.json"))
        tokens = folder / "tokens.txt"
        treernn("lmzoo", "tokenize", job["sentences"], *common, *unk, "--out", str(tokens))
        # unkify marks the same tokens whichever way tokenize writes them: it takes no --unk
        treernn("lmzoo", "unkify", job["sentences"], *common, "--out", str(folder / "unks.txt"))
        treernn(
            "lmzoo", "get-surprisals", job["sentences"], *common, *unk,
            "--out", str(folder / "surprisals.tsv"),
        )  # fmt: skip
        treernn("syntaxgym", suite.source, *common, "--items", "--out", str(folder))
    package_side("results")
    totals = Differences()
    for suite, job in zip(suites, jobs):
        found = compare(Path(job["folder"]), suite.name)
        totals.add(found)
        print(
            f"{suite.name:<24} {found.items:>4} items, {found.items_differ} differ; "
            f"{found.regions:>5} region values, {found.values_differ} differ"
        )
        for example in found.examples[:5]:
            print("    " + example)
    tokens = "<unk>" if args.unk else "words"
    print(
        f"{len(suites)} suites, {totals.items} items: {totals.items_differ} items differ in a "
        f"prediction, {totals.values_differ} of {totals.regions} region values differ by more "
        f"than 1e-12 (unknown words written as {tokens}; {time.perf_counter() - start:.0f} s; "
        f"files in {work})"
    )
    if totals.items_at_unk_runs or totals.values_at_unk_runs:
        print(
            f"of those, {totals.items_at_unk_runs} items and {totals.values_at_unk_runs} region "
            "values lie in a run of <unk> tokens across a region boundary, which the package "
            "puts into the run's leftmost region and treernn splits as the regions' words; "
            f"{totals.unexplained} differences otherwise"
        )
    return 1 if totals.unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
