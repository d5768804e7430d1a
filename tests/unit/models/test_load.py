"""treernn.models.load: a loaded model computes with the kernel choices it was loaded with, whatever
model the process loads after it (the kernels' context is the process's)."""

from __future__ import annotations

import json
import shutil

import treernn
from tests.paths import FIXTURES
from treernn.kernels import choices, gemm

FIXTURE = FIXTURES / "exported_onlstm_lm"
#: sentences in the fixture's vocabulary (it has no <unk>)
SENTENCES = json.loads((FIXTURES / "exported_onlstm_lm_expected.json").read_text())["sentences"]


def _answers(model) -> tuple:
    """The model's surprisals and trees of `SENTENCES`, and the kernel choices they were computed
    with (name -> backend). Other backends need not change a number: on an Intel Xeon without
    AVX512-BF16 MKL and oneDNN gave these small products bit for bit the same results."""
    answers = model.surprisals(SENTENCES), model.trees(SENTENCES)
    return answers, {name: choice for name, (choice, _) in choices.used().items()}


def _other_choices() -> None:
    """What another process could have left in the machine's cache since (a choice probed under
    load and probed again on an idle machine): every kept choice turned to another candidate."""
    machine = choices.machine_file()
    stored = json.loads(machine.read_text())
    for name, value in list(stored.items()):
        if isinstance(value, str) and " | of " in name:
            usable = name.rsplit(" | of ", 1)[1].split()
            stored[name] = usable[(usable.index(value) + 1) % len(usable)]
    machine.write_text(json.dumps(stored))


def _instant_probes(products, flops, device=gemm.CPU, give_up=None) -> dict[str, float]:
    """Every probe ranks its candidates in the order given (real timings took this test 3 min)."""
    return {name: 1e-3 * (1 + rank) for rank, name in enumerate(products)}


def test_a_model_keeps_its_kernel_choices_when_another_model_is_loaded(
    tmp_path, monkeypatch, data_cache
):  # data_cache: a fresh machine cache, with the compiled kernels already loaded
    monkeypatch.setattr(gemm, "time_in_turns", _instant_probes)
    monkeypatch.setattr(gemm, "machine_busy", lambda since: None)
    other = tmp_path / "other"  # another model: another config.json, so another cache key
    shutil.copytree(FIXTURE, other)
    config = json.loads((other / "config.json").read_text())
    config["provenance"]["command"] += " seed=2"
    (other / "config.json").write_text(json.dumps(config))

    first = treernn.load(FIXTURE, device="cpu")
    expected, first_choices = _answers(first)
    _other_choices()
    second = treernn.load(other, device="cpu")
    # the same weights read with the machine's new choices
    second_answers, second_choices = _answers(second)
    assert first_choices and second_choices.keys() == first_choices.keys()
    assert all(second_choices[name] != choice for name, choice in first_choices.items())
    assert _answers(first) == (expected, first_choices)
    assert _answers(second) == (second_answers, second_choices)  # and back
