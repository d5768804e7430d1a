"""Output layers under bf16-mixed (``gemm.decided_linear``): bf16 only where a probe finds it
faster here. On a CPU without bf16 GEMM kernels (AMD Zen 3, AVX2 only) autocast's bf16 products
run on torch's reference loop, and the language model's tied decoder made a bf16-mixed training
step 6-30x slower than fp32 (2026-11-30)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from treernn import kernels
from treernn.encoders.base import EncoderOutput
from treernn.encoders.lstm import LSTMEncoder
from treernn.kernels import gemm
from treernn.tasks.classification import ClassificationTask
from treernn.tasks.dependency_lm import DependencyLanguageModel
from treernn.tasks.language_model import LanguageModelTask


class Decision:
    """A stand-in for ``gemm.product_dtype``: records what was asked, runs the probe's runs
    once, and answers bf16 where ``pays``."""

    def __init__(self, pays: bool) -> None:
        self.pays, self.asked = pays, []

    def __call__(self, rows, in_features, out_features, device, model, product, runs):
        loops, flops = runs()
        assert "float32" in loops and flops > 0
        self.asked.append((rows, in_features, out_features, model, product))
        return torch.bfloat16 if self.pays else None


def test_without_autocast_it_is_f_linear_and_probes_nothing(monkeypatch) -> None:
    monkeypatch.setattr(gemm, "product_dtype", lambda *args: pytest.fail("probed in fp32"))
    x, w, b = torch.randn(3, 5, 8), torch.randn(6, 8), torch.randn(6)
    assert torch.equal(gemm.decided_linear(x, w, b, "m", "p"), F.linear(x, w, b))


@pytest.mark.parametrize("pays", [False, True])
def test_under_bf16_autocast_bf16_only_where_it_pays(pays: bool, monkeypatch) -> None:
    decision = Decision(pays)
    monkeypatch.setattr(gemm, "product_dtype", decision)
    x, b = torch.randn(3, 5, 8), torch.randn(6)
    w = torch.randn(6, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = gemm.decided_linear(x, w, b, "language model", "decoder")
    # 15 rows are probed at the power of two below (8), as the training product
    assert decision.asked == [(8, 8, 6, "language model", "decoder, training")]
    assert out.shape == (3, 5, 6)
    if pays:
        assert out.dtype == torch.bfloat16
    else:  # exactly the fp32 product, as with precision=32
        assert out.dtype == torch.float32
        assert torch.equal(out, F.linear(x, w, b))


def test_the_probe_has_no_bf16_run_where_the_cpu_has_no_bf16_kernels(monkeypatch, tmp_path) -> None:
    """The real decision on a CPU without oneDNN's bf16 kernels: fp32, recorded, without ever
    timing a bf16 product (there it would run on the reference loop)."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))  # the decision is kept there
    monkeypatch.setattr(gemm, "onednn_available", lambda dtype=torch.float32: False)
    runs, flops = gemm._linear_runs(16, torch.randn(7, 9), torch.randn(7), training=True)
    assert set(runs) == {"float32"}
    assert flops == 2.0 * 16 * 9 * 7 * 3  # forward, input and weight gradients
    runs["float32"]()  # runs, and accumulates no gradient into the caller's weight

    monkeypatch.setattr(gemm, "DECISIONS", {})
    x, w = torch.randn(4, 33, 13), torch.randn(11, 13, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = gemm.decided_linear(x, w, None, "language model", "decoder")
    assert out.dtype == torch.float32 and w.grad is None
    shape = gemm._shape_text(128, 13, 11)
    assert {("language model", "decoder, training", shape): "float32"} == gemm.DECISIONS


def test_a_classifier_keeps_its_fp32_logits_where_bf16_does_not_pay(monkeypatch) -> None:
    """Every layer of the classifier's MLP is decided: with fp32 decided, the logits under bf16
    autocast are those of precision=32 (the LSTM encoder decides its own products alike)."""
    decision = Decision(pays=False)
    monkeypatch.setattr(gemm, "product_dtype", decision)
    task = ClassificationTask(
        encoder=functools.partial(LSTMEncoder, hidden_size=5),
        vocab_size=6,
        num_classes=3,
        num_sentences=1,
        embedding_size=4,
        mlp_layers=1,
        mlp_hidden_size=7,
    ).eval()
    pooled = torch.randn(4, 5)
    with torch.no_grad():
        fp32 = task.classify(pooled)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = task.classify(pooled)
    assert mixed.dtype == torch.float32 and torch.equal(mixed, fp32)
    assert [asked[1:3] for asked in decision.asked] == [(5, 7), (7, 3)]


# ----------------------------------------------------------------------------- the tasks' heads
@pytest.fixture
def pinned(tmp_path, monkeypatch):
    """Every kernel choice at its reference, as a run with a probing budget of 0 s and nothing
    recorded or kept: fp32 products, aten's GEMM."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TREERNN_PROBE_SECONDS", "0")
    kernels.context.attach(tmp_path / "run", write=False)


def _language_model() -> LanguageModelTask:
    encoder = functools.partial(LSTMEncoder, hidden_size=4)
    return LanguageModelTask(encoder, vocab_size=3, embedding_size=4).eval()


def test_the_heads_keep_their_parameter_names() -> None:
    """Checkpoints and exports name the heads' parameters: the encoder's part in the product
    leaves them as the tasks' own ``nn.Linear`` layers named them."""
    encoder = functools.partial(LSTMEncoder, hidden_size=5)
    tasks = {
        "lm": LanguageModelTask(encoder, vocab_size=7, embedding_size=5),
        "classifier": ClassificationTask(
            encoder, vocab_size=7, num_classes=3, num_sentences=2, embedding_size=4,
            mlp_layers=1, mlp_hidden_size=6,
        ),
        "dependency lm": DependencyLanguageModel(encoder, vocab_size=7, embedding_size=4),
    }  # fmt: skip
    heads = {
        name: [k for k in task.state_dict() if not k.startswith(("encoder.", "embedding."))]
        for name, task in tasks.items()
    }
    assert heads == {
        "lm": ["decoder.weight", "decoder.bias"],
        "classifier": [
            "classifier.1.weight", "classifier.1.bias", "classifier.4.weight", "classifier.4.bias"
        ],
        "dependency lm": ["log_z", "decoder.weight", "decoder.bias"],
    }  # fmt: skip
    assert type(tasks["lm"].decoder) is type(tasks["dependency lm"].decoder) is torch.nn.Linear


@pytest.mark.parametrize("bf16_mixed", [False, True])
def test_a_language_model_decodes_as_before_with_the_choices_pinned(bf16_mixed, pinned) -> None:
    """The decoder's logits with every choice pinned: worked out by hand on values every
    precision holds exactly (in fp32, as with precision=32, under bf16-mixed too), and bit for
    bit ``F.linear``'s fp32 product on random ones."""
    task = _language_model()
    weight = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, 1.0, -1.0], [2.0, 2.0, -0.25, 0.0]])
    with torch.no_grad():
        task.decoder.weight.copy_(weight)
        task.decoder.bias.copy_(torch.tensor([0.5, -1.0, 0.0]))
    hidden = torch.tensor([[[1.0, 2.0, 4.0, -1.0], [0.5, 0.0, -2.0, 3.0]]])  # (1, 2, 4)
    random = torch.randn(3, 5, 4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_mixed):
        logits, _ = task.decode(EncoderOutput(hidden=hidden, pooled=hidden[:, -1]))
        random_logits, _ = task.decode(EncoderOutput(hidden=random, pooled=random[:, -1]))
    # -4 + 0.5, 7 - 1, 5 + 0; 8.5 + 0.5, -5 - 1, 1.5 + 0
    expected = torch.tensor([[[-3.5, 6.0, 5.0], [9.0, -6.0, 1.5]]])
    assert logits.dtype == random_logits.dtype == torch.float32
    assert torch.equal(logits, expected)
    assert torch.equal(random_logits, F.linear(random, task.decoder.weight, task.decoder.bias))


@pytest.mark.parametrize("bf16_mixed", [False, True])
def test_a_classifier_classifies_as_before_with_the_choices_pinned(bf16_mixed, pinned) -> None:
    """Every layer of the MLP with every choice pinned: the fp32 products bit for bit."""
    task = ClassificationTask(
        encoder=functools.partial(LSTMEncoder, hidden_size=5), vocab_size=6, num_classes=3,
        num_sentences=1, embedding_size=4, mlp_layers=1, mlp_hidden_size=7,
    ).eval()  # fmt: skip
    pooled = torch.randn(4, 5)
    with torch.no_grad():
        first, activation, last = task.classifier[1], task.classifier[2], task.classifier[4]
        hidden = activation(F.linear(pooled, first.weight, first.bias))  # ELU
        expected = F.linear(hidden, last.weight, last.bias)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_mixed):
            logits = task.classify(pooled)
    assert logits.dtype == torch.float32 and torch.equal(logits, expected)
