"""``examples/tutorial.ipynb`` runs top to bottom (train, load, trees, surprisals, export, load
the export), executed with nbclient as a reader would run it."""

from __future__ import annotations

import pytest

from tests.integration.helpers import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("data_dir")]


def test_the_tutorial_runs(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT / "src"))
    notebook = nbformat.read(REPO_ROOT / "examples" / "tutorial.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "same numbers: True" in outputs
    assert "layer 2:" in outputs and "bits" in outputs
