"""The benchmark script refuses option values it does not know, naming the valid ones (a
misspelt model once ran a different model under the misspelt name)."""

from __future__ import annotations

import pytest

from tests.paths import script_module


@pytest.fixture(scope="module")
def bench_script():
    with script_module("benchmark_recurrence") as module:
        yield module


@pytest.mark.parametrize(
    "options, message",
    [
        (["--models", "nn.LSTM,LSTM fast"], "unknown model 'LSTM fast'; the models are nn.LSTM, "
         "LSTMEncoder, ON-LSTM fast, ON-LSTM ref"),
        (["--models", "ON-LSTM ref:mkl"], "only 'ON-LSTM fast' takes a /variant or a :backend"),
        (["--models", "ON-LSTM fast/fused"], "unknown variant 'fused'; the variants are "
         "torch-ops, separate-projection"),
        (["--models", "ON-LSTM fast:blas"], "unknown GEMM backend 'blas'"),
        (["--sizes", "paper,tiny"], "--sizes: unknown 'tiny'; choose from paper, small"),
        (["--modes", "eval"], "--modes: unknown 'eval'; choose from train, infer"),
        (["--precisions", "bf16"], "choose from fp32, bf16-mixed"),
    ],
)  # fmt: skip
def test_unknown_option_values_stop_with_the_valid_ones(bench_script, capsys, options, message):
    with pytest.raises(SystemExit) as stopped:
        bench_script.main(options)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_known_model_names_pass(bench_script):
    models = ["nn.LSTM", "LSTMEncoder", "ON-LSTM ref", "ON-LSTM fast:onednn"]
    models += ["ON-LSTM fast/torch-ops", "ON-LSTM fast/separate-projection:treernn"]
    for model in models:
        assert bench_script.model_problem(model) is None, model
