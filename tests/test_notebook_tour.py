"""examples/tour.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel), on this clone's code.

The kernel is ``python3``: jupyter_client starts it with this interpreter (a kernel command ``python`` is
replaced by ``sys.executable``), and PYTHONPATH puts this clone first, as the tests' own imports have it.
"""

from __future__ import annotations

import ast
import base64
import os
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "examples" / "tour.ipynb"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.slow

WHERE = "import sys, explorer, ops\nprint(sys.executable)\nprint(explorer.__file__)\nprint(ops.__file__)"


@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel inherits this environment: this clone first on its path, TensorFlow quiet, no GPU."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def execute(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    NotebookClient(notebook, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    return notebook


def values(array) -> np.ndarray:
    """A plotly JSON array: a list, or a typed array ``{"dtype": "f8", "bdata": <base64>}``."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).astype(np.float64)
    return np.asarray(array, np.float64)


def tagged(notebook: nbformat.NotebookNode, tag: str) -> list:
    return [cell for cell in notebook.cells if tag in cell.get("metadata", {}).get("tags", [])]


def test_the_tour_is_stored_without_outputs():
    notebook = nbformat.read(TOUR, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert notebook.metadata.kernelspec.name == "python3"


def test_the_tour_runs_in_a_real_kernel_and_shows_its_figures_and_report(kernel_env):
    notebook = nbformat.read(TOUR, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(WHERE))
    execute(notebook)  # raises CellExecutionError on the first cell that raises
    errors = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
              if output.output_type == "error"]  # fmt: skip
    assert errors == []
    executable, explorer_file, ops_file = notebook.cells[-1].outputs[-1].text.split()
    assert Path(executable).resolve() == Path(sys.executable).resolve()
    assert Path(explorer_file).is_relative_to(ROOT) and Path(ops_file).is_relative_to(ROOT)
    figures = tagged(notebook, "figure")
    assert len(figures) == 3  # the three panels, the compare overlay, the loss curves
    for cell in figures:
        shown = [output.data[PLOTLY_MIME] for output in cell.outputs if PLOTLY_MIME in output.get("data", {})]
        assert len(shown) == 1 and shown[0]["data"], cell.source
    main, compare, training = (next(o.data[PLOTLY_MIME] for o in c.outputs if PLOTLY_MIME in o.get("data", {}))
                               for c in figures)  # fmt: skip
    assert {"forward", "custom gradient"} <= {trace.get("name") for trace in main["data"]}
    assert {"hard_tanh_ste", "ste_sign"} <= {trace.get("name") for trace in compare["data"]}
    assert [trace["name"] for trace in training["data"]] == ["hard_tanh_ste (custom)", "ste_sign (custom)"]
    # both runs trained all 40 epochs with a finite loss that fell: the figure's curves and the table cell agree
    for trace in training["data"]:
        loss = values(trace["y"])
        assert loss.shape == (40,) and np.isfinite(loss).all() and loss[-1] < loss[0], trace["name"]
    (rows,) = tagged(notebook, "training")
    (result,) = [output for output in rows.outputs if output.output_type == "execute_result"]
    finished = ast.literal_eval(result.data["text/plain"])  # [(label, status, final loss), ...]
    assert [(label, status) for label, status, _ in finished] == [("hard_tanh_ste (custom)", "ok"), ("ste_sign (custom)", "ok")]
    for (_, _, final), trace in zip(finished, training["data"], strict=True):
        assert final == pytest.approx(values(trace["y"])[-1], abs=5e-5)  # rounded to 4 decimals in the cell
    (report,) = tagged(notebook, "report")
    pages = [output.data["text/html"] for output in report.outputs if "text/html" in output.get("data", {})]
    assert len(pages) == 1 and "gradient-explorer-check" in pages[0] and "hard_tanh_ste: ok" in pages[0]
    (widget,) = tagged(notebook, "widget")
    assert any(WIDGET_MIME in output.get("data", {}) for output in widget.outputs)


def test_a_broken_cell_fails_the_run(kernel_env):
    notebook = nbformat.read(TOUR, as_version=4)
    first_code = next(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code")
    notebook.cells.insert(first_code + 1, nbformat.v4.new_code_cell('explorer.plot("no_such_op")'))
    with pytest.raises(CellExecutionError, match="unknown op 'no_such_op'"):
        execute(notebook)
    later = [cell for cell in notebook.cells[first_code + 2 :] if cell.cell_type == "code"]
    assert all(cell.outputs == [] for cell in later)  # the run stopped at the broken cell
