"""The block-sparse plot draws the native CPU kernel beside the composition, from the rows results.json holds."""

import json
import pathlib

import pytest

pytest.importorskip("matplotlib")

from benchmarks import plots

REPO = pathlib.Path(__file__).resolve().parents[1]


def _row(step: str, density: float, ours: float, native: float | None) -> dict:
    row = {"pass": step, "density": density, "ours_ms": ours, "ours_spread_ms": [ours * 0.9, ours * 1.1],
           "dense_ms": 100.0, "dense_spread_ms": [95.0, 105.0], "copy_limit_ms": 5.0}
    if native is not None:
        row |= {"native_ms": native, "native_spread_ms": [native * 0.9, native * 1.2]}
    return row


def _drawn(block_sparse: dict, monkeypatch, tmp_path) -> dict[str, list[tuple[float, float]]]:
    """Each panel's series: legend label -> the (density, ms) points drawn."""
    seen = {}

    def keep(fig, path):
        for ax in fig.axes:
            handles, labels = ax.get_legend_handles_labels()
            for handle, label in zip(handles, labels):
                line = handle[0] if isinstance(handle, tuple) else handle
                if hasattr(line, "get_xdata"):
                    seen[(ax.get_title().split(":")[0], label)] = list(zip(line.get_xdata(), line.get_ydata()))

    monkeypatch.setattr(plots, "_save", keep)
    plots.block_sparse_plot(block_sparse, str(tmp_path / "block_sparse.png"))
    return seen


def test_the_native_series_is_drawn_at_its_own_times(monkeypatch, tmp_path):
    rows = [_row(step, d, ours, native) for step in ("fwd", "fwd+bwd")
            for d, ours, native in ((0.1, 60.0, 20.0), (0.5, 250.0, 90.0), (1.0, 480.0, None))]
    seen = _drawn({"m": 8, "k": 8, "n": 8, "block_size": 4, "rows": rows}, monkeypatch, tmp_path)
    native = [key for key in seen if "native" in key[1]]
    assert sorted(step for step, _ in native) == ["fwd", "fwd+bwd"]
    for key in native:
        assert seen[key] == [(0.1, 20.0), (0.5, 90.0)]  # the row without a native time is left out, not zero
    assert seen[("fwd", "ours, stock-op composition")] == [(0.1, 60.0), (0.5, 250.0), (1.0, 480.0)]


def test_the_committed_results_hold_native_times_for_the_plot():
    results = json.loads((REPO / "benchmarks" / "results.json").read_text())["results"]
    rows = results["embedding_bag_and_block_sparse"]["block_sparse"]["rows"]
    assert {r["pass"] for r in rows if r.get("native_ms") is not None} == {"fwd", "fwd+bwd"}
