"""Every command line in the README and the docs works as written, without training: each
``python train.py ...`` line composes (what ``python train.py ... --cfg job`` does) and each
``python -m treernn <command> ...`` line parses with the commands' parser. The lines are read
from the markdown's bash code blocks, so a renamed key, preset or option fails here."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from treernn.commands import build_parser
from treernn.lifecycle.resolvers import register_resolvers

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")


def shell_lines(path: Path) -> list[str]:
    """The commands of a markdown file's shell code blocks (``bash``, ``sh`` or unlabelled),
    continuation lines joined."""
    lines, in_block, shell, pending = [], False, False, ""
    for raw in path.read_text().splitlines():
        fence = FENCE.match(raw.strip())
        if fence:
            in_block, shell = not in_block, fence.group(1) in ("bash", "sh", "")
            continue
        if not (in_block and shell):
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        lines.append(line)
    return lines


def words(command: str) -> list[str]:
    """The words of a command, a ``<placeholder>`` kept as one word and comments dropped."""
    command = re.sub(r"<[^>]*>", lambda match: match.group(0).replace(" ", "_"), command)
    command = re.split(r"(?:^|\s)#", command, maxsplit=1)[0]  # a comment may hold a quote
    return shlex.split(command)


def commands_of(program: str) -> list[tuple[str, list[str]]]:
    """(where, arguments) of every line that runs ``program`` (``train.py`` or ``treernn``),
    across ``&&`` and behind environment assignments, ``srun`` or ``torchrun`` options."""
    found = []
    for page in PAGES:
        for line in shell_lines(page):
            for part in line.split("&&"):
                argv = words(part)
                where = f"{page.name}: {part.strip()}"
                if program == "train.py" and "train.py" in argv:
                    found.append((where, argv[argv.index("train.py") + 1 :]))
                module = ["python", "-m", "treernn"]
                starts = [i for i in range(len(argv)) if argv[i : i + 3] == module]
                if program == "treernn" and starts:
                    found.append((where, argv[starts[0] + 3 :]))
    return found


TRAIN_LINES = commands_of("train.py")
TREERNN_LINES = commands_of("treernn")


def test_the_pages_hold_the_commands_this_checks():
    # the README's set-up line and quickstart, and the docs' pages, are all read
    assert len(TRAIN_LINES) > 40 and len(TREERNN_LINES) > 25
    main_job = "README.md: TREERNN_DATA_DIR=../shared/data python train.py   # install + main job"
    assert (main_job, []) in TRAIN_LINES


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory) -> Path:
    """The repository's configs, plus the worked example's model as the "bring your own model"
    page makes it (``conf/model/gru.yaml`` from the example's yaml)."""
    conf = tmp_path_factory.mktemp("conf") / "conf"
    shutil.copytree(REPO_ROOT / "conf", conf)
    example = REPO_ROOT / "tests/fixtures/example_model/conf/model/example_gru.yaml"
    text = example.read_text().replace("tests.fixtures.example_model.gru", "treernn.encoders.gru")
    (conf / "model" / "gru.yaml").write_text(text)
    return conf


#: what a reader puts in place of a placeholder that names a config choice
CHOICES = {"<task>": "ptb", "<encoder>": "lstm", "<model>": "lstm", "<table>": "logic"}


def filled(override: str) -> str:
    """``override`` with its placeholders filled in: a choice by an example, a value (a path, a
    partition) by a word, as a reader would fill them."""
    for placeholder, choice in CHOICES.items():
        override = override.replace(placeholder, choice)
    return re.sub(r"<[^>]*>", "placeholder", override)


def first_job(overrides: list[str]) -> list[str]:
    """A sweep's first job: each swept override at its first value (``a=1,2`` -> ``a=1``)."""
    overrides = [filled(override) for override in overrides]
    parsed = OverridesParser.create().parse_overrides(overrides)
    jobs = []
    for text, override in zip(overrides, parsed, strict=True):
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()))
            jobs.append(f"{override.get_key_element()}={first}")
        else:
            jobs.append(text)
    return jobs


@pytest.mark.slow  # about half a second each, 40 s in all
@pytest.mark.parametrize(("where", "argv"), TRAIN_LINES, ids=[w for w, _ in TRAIN_LINES])
def test_each_train_line_composes(config_dir, where, argv):
    register_resolvers()
    overrides = [arg for arg in argv if not arg.startswith("-")]
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        cfg = compose("config", overrides=first_job(overrides), return_hydra_config=True)
    assert cfg.task.name and cfg.model._target_


@pytest.mark.parametrize(("where", "argv"), TREERNN_LINES, ids=[w for w, _ in TREERNN_LINES])
def test_each_treernn_line_parses(where, argv):
    parser = build_parser(argv)
    if "--help" in argv or "-h" in argv:
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args(argv)
        assert stopped.value.code == 0
        return
    args = parser.parse_args(argv)
    assert args.command == argv[0]


def test_a_wrong_line_is_caught(config_dir):
    """The checks can fail: an unknown preset does not compose, an unknown option does not
    parse."""
    register_resolvers()
    GlobalHydra.instance().clear()
    with (
        pytest.raises(Exception, match="onlstm_ptbb"),
        initialize_config_dir(str(config_dir), version_base="1.3"),
    ):
        compose("config", overrides=["experiment=onlstm/onlstm_ptbb"])
    argv = words("python -m treernn parse --ckpt <checkpoint> --gold-set sample10")[3:]
    with pytest.raises(SystemExit):
        build_parser(argv).parse_args(argv)


def test_logger_wandb_keeps_the_csv_logger(config_dir):
    """``logger=wandb`` writes csv/metrics.csv too: the curves and the claims read it."""
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["logger=wandb"])
    assert set(cfg.logger) == {"csv", "wandb"}
    assert cfg.logger.csv._target_ == "lightning.pytorch.loggers.CSVLogger"
