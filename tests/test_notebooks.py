"""The notebooks under notebooks/: committed with their outputs (`make notebooks`), and they run top to bottom.

Each notebook runs in a fresh python3 kernel started from notebooks/ (as a user
opening it from a clone would), with the repository on PYTHONPATH. A cell
error fails the test. A few outputs are then checked against what they must
show: the quickstart's loss goes down, and the gains table of sparse_ops
matches the ConvertToCooTensor rule computed here in plain Python from the
notebook's own input table.
"""

import importlib.util
import pathlib
import re

import nbformat
import oracles
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO_ROOT / "notebooks"
NAMES = ["quickstart.ipynb", "sparse_ops.ipynb"]


def _load_regenerate():
    spec = importlib.util.spec_from_file_location("notebooks_regenerate", NOTEBOOKS / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regenerate = _load_regenerate()  # notebooks/ is not a package


def _read(name: str):
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _execute(name: str):
    return regenerate.execute(name)  # as `make notebooks` runs it; raises CellExecutionError naming the cell


def _tagged(nb, tag: str):
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return cells[0]


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts.append(out.data.get("text/markdown") or out.data.get("text/plain", ""))
    return "\n".join(parts)


def _markdown_table(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `text`, as lists of cell strings."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    assert len(lines) >= 3, f"no Markdown table in:\n{text}"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_the_outputs_of_one_run(name):
    nb = _read(name)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{name} has no code cells"
    # One run, top to bottom, every cell: what `make notebooks` (notebooks/regenerate.py) saves.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), name
    assert all(c.outputs for c in code if c.metadata.get("tags")), f"{name}: a tagged cell has no output"
    assert sum(bool(c.outputs) for c in code) >= len(code) // 2, f"{name}: most cells show nothing"
    for cell in code:
        assert set(cell.metadata) <= {"tags"}, f"{name}: cell {cell.id} carries metadata {dict(cell.metadata)}"
        assert not [o for o in cell.outputs if o.output_type == "error"], f"{name}: cell {cell.id} failed"
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, f"{name}: notebook metadata {dict(nb.metadata)}"


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_hold_no_tensorflow_log_lines(name):
    from test_readme import _TF_LOG_LINE

    noisy = [line for cell in _read(name).cells if cell.cell_type == "code"
             for line in _text(cell).splitlines() if _TF_LOG_LINE.search(line)]
    assert not noisy, noisy[:3]


def test_the_tensorflow_log_line_pattern_catches_what_a_kernel_printed():
    from test_readme import _TF_LOG_LINE

    # Lines a notebook kernel captured before the notebooks imported TensorFlow quietly.
    for line in ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
                 "I0000 00:00:1796595182.060954   24737 port.cc:153] oneDNN custom operations are on.",
                 "E0000 00:00:1796595183.251988   24737 cuda_platform.cc:52] failed call to cuInit: INTERNAL"):
        assert _TF_LOG_LINE.search(line), line


def test_the_notebooks_are_regenerated_by_make_notebooks():
    import subprocess

    plan = subprocess.run(["make", "-n", "notebooks"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0 and "notebooks/regenerate.py" in plan.stdout, plan.stdout + plan.stderr
    assert regenerate.NAMES == NAMES == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def _reference_gains(entries: list[tuple[int, int, float]]) -> dict[str, list[tuple[int, int, float]]]:
    """The oracle's COO of the table's (row, id, weight) entries (sorted by row), per combiner."""
    ids: list[list[int]] = [[] for _ in range(1 + max((r for r, _, _ in entries), default=-1))]
    weights: list[list[float]] = [[] for _ in ids]
    for row, col, weight in entries:
        ids[row].append(col)
        weights[row].append(weight)
    return {name: list(zip(*oracles.coo(ids, weights, name))) for name in oracles.COMBINERS}


@pytest.mark.slow
def test_sparse_ops_notebook_runs_and_its_gains_table_follows_the_rule():
    nb = _execute("sparse_ops.ipynb")
    inputs = [(int(r), int(c), float(w)) for _, r, c, w in _markdown_table(_text(_tagged(nb, "input-table")))]
    # The example must exercise the merge rule, or the table below proves little.
    assert any(a[:2] == b[:2] for a, b in zip(inputs, inputs[1:])), inputs
    expected = _reference_gains(inputs)
    shown = _markdown_table(_text(_tagged(nb, "gains-table")))
    assert [(int(r), int(c)) for r, c, *_ in shown] == [(r, c) for r, c, _ in expected["sum"]]
    for column, name in enumerate(("sum", "mean", "sqrtn"), start=2):
        got = [float(row[column]) for row in shown]
        want = [g for _, _, g in expected[name]]
        assert got == pytest.approx(want, rel=1e-5), name


@pytest.mark.slow
def test_quickstart_notebook_runs_and_its_loss_goes_down():
    nb = _execute("quickstart.ipynb")
    text = _text(_tagged(nb, "loss-summary"))
    found = re.search(r"(\d+) steps: mean loss of the first 5 ([\d.]+), of the last 5 ([\d.]+)", text)
    assert found, f"no loss summary in:\n{text}"
    steps, first, last = int(found[1]), float(found[2]), float(found[3])
    assert steps >= 20
    # Untrained, the loss is near log(2) = 0.69; the clicks depend on the features read, so it must fall.
    assert 0.0 < last < first - 0.05, (first, last)
