"""The benchmark suite: normalised rows say which side wins and flag unsettled ratios; a quick run writes
RESULTS.md, results.json and the plots with a row for every benchmark (timings are never asserted)."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks.report import results_markdown
from benchmarks.suite import BENCHMARKS, comparison_row

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ratio_is_above_one_when_ours_wins_whatever_the_unit_direction():
    rate = comparison_row("b", "w", "p", "rows/s", True, (300.0, 290.0, 310.0), (100.0, 95.0, 105.0))
    time = comparison_row("b", "w", "p", "ms", False, (2.0, 1.9, 2.1), (8.0, 7.5, 8.5))
    assert rate["ratio"] == pytest.approx(3.0)
    assert time["ratio"] == pytest.approx(4.0)
    slower = comparison_row("b", "w", "p", "ms", False, (8.0, 7.9, 8.1), (2.0, 1.9, 2.1))
    assert slower["ratio"] == pytest.approx(0.25)


def test_a_spread_wider_than_the_gap_between_medians_is_flagged_noisy():
    settled = comparison_row("b", "w", "p", "ms", False, (10.0, 9.5, 10.5), (12.0, 11.5, 12.5))
    unsettled = comparison_row("b", "w", "p", "ms", False, (10.0, 9.0, 13.0), (12.0, 11.5, 12.5))
    assert not settled["noisy"]
    assert unsettled["noisy"]  # ours ranges over 4 ms, the medians are 2 ms apart
    # Without spreads the benchmark's own verdict stands.
    assert comparison_row("b", "w", "p", "ms", False, (1.0, None, None), (2.0, None, None), noisy=True)["noisy"]


def test_a_failed_benchmark_appears_in_the_results_with_its_traceback():
    report = {
        "quick": True,
        "environment": {
            "cpu": "cpu",
            "cores": 2,
            "cores_usable": 2,
            "ram_gib": 8.0,
            "load_average_at_start": None,
            "os": "os",
            "versions": {"python": "3"},
            "date": "today",
            "commit": None,
        },
        "seconds": 1.0,
        "runs": [{"name": "io_formats", "seconds": 0.1, "error": "Traceback ...\nImportError: boom"}],
        "rows": [],
        "plots": [],
        "plot_notes": [],
    }
    text = results_markdown(report)
    assert "| io_formats | FAILED |" in text
    assert "ImportError: boom" in text


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(output)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return output, done


def test_quick_run_writes_results_and_plots_with_a_row_per_benchmark(quick_run):
    output, done = quick_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in BENCHMARKS:
        assert f"[benchmarks] {name}: done in" in done.stdout  # progress lines
    report = json.loads((output / "results.json").read_text())
    markdown = (output / "RESULTS.md").read_text()
    assert not [run for run in report["runs"] if "error" in run]
    for name in BENCHMARKS:
        rows = [row for row in report["rows"] if row["benchmark"] == name]
        assert rows, f"no comparison row for {name}"
        for row in rows:
            assert all(math.isfinite(row[key]) and row[key] > 0 for key in ("ours", "peer", "ratio")), row
            assert f"| {row['what']} | {row['peer_name']} | {row['unit']} |" in markdown
    for key in ("cpu", "cores", "ram_gib", "date"):
        assert report["environment"][key]
    assert {"python", "tensorflow", "apache-beam", "pyarrow", "numpy"} <= set(report["environment"]["versions"])
    for plot in ("throughput.png", "block_sparse.png", "batch_size.png"):
        data = (output / "plots" / plot).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) < 200_000
        assert f"plots/{plot}" in markdown


def test_paired_compares_round_by_round_with_a_sign_test_against_scipy():
    from scipy.stats import binomtest

    from benchmarks._timing import Timing, paired

    # A load burst in round 3 slows both; per round, `a` takes 0.8x of `b` in 9 of 10 rounds.
    b_samples = [1.0, 1.1, 5.0, 1.0, 0.9, 1.2, 1.0, 1.05, 0.95, 1.0]
    a_samples = [0.8 * x for x in b_samples[:9]] + [1.3]
    a = Timing(0.0, 0.0, 0.0, 10, tuple(a_samples))
    b = Timing(0.0, 0.0, 0.0, 10, tuple(b_samples))
    result = paired(a, b)
    assert result.wins == 9 and result.rounds == 10
    assert result.median_ratio == pytest.approx(0.8)
    assert result.p_value == pytest.approx(binomtest(9, 10, 0.5, alternative="greater").pvalue)
    with pytest.raises(ValueError, match="per-round samples"):
        paired(a, Timing(0.0, 0.0, 0.0, 3, (1.0, 1.0, 1.0)))


def test_alternate_keeps_each_rounds_time_in_round_order():
    from benchmarks._timing import alternate

    ticks = iter(range(1000))
    calls = []
    timings = alternate(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        reps=3,
        warmup=0,
        clock=lambda: float(next(ticks)),
    )
    # Each call spans one tick of the fake clock.
    assert timings["a"].samples == (1.0, 1.0, 1.0)
    assert calls == ["a", "b", "b", "a", "a", "b"]  # the starting contender rotates each round


def test_alternate_calls_before_ahead_of_each_timed_call_outside_the_timing():
    from benchmarks._timing import alternate

    now = [0.0]
    calls = []

    def contender(name, cost):
        def call():
            calls.append(name)
            now[0] += cost

        return call

    timings = alternate(
        {"a": contender("a", 1.0), "b": contender("b", 10.0)},
        reps=2,
        warmup=1,
        clock=lambda: now[0],
        before=contender("flush", 100.0),
    )
    assert calls == ["a", "b", "flush", "a", "flush", "b", "flush", "b", "flush", "a"]
    assert timings["a"].samples == (1.0, 1.0) and timings["b"].samples == (10.0, 10.0)


def test_results_list_the_fast_paths_against_the_general_path():
    report = {
        "quick": False,
        "environment": {
            "cpu": "cpu", "cores": 2, "cores_usable": 2, "ram_gib": 8.0, "load_average_at_start": None,
            "os": "os", "versions": {"python": "3"}, "date": "today", "commit": None,
        },
        "seconds": 1.0,
        "runs": [],
        "rows": [],
        "plots": [],
        "plot_notes": [],
        "results": {
            "convert_to_coo": {
                "variants": {
                    "multi": {
                        "fast_paths_vs_general": {
                            "sum, single w": {
                                "cpu vs general": 0.68, "paired cpu vs general": 0.66, "cheaper in rounds": "40/41",
                                "sign test p": 1.9e-11, "bytes+weights vs general": 0.87,
                            }
                        }
                    }
                }
            }
        },
    }
    text = results_markdown(report)
    assert "## convert_to_coo: fast paths against the general path" in text
    assert "| multi | sum, single w | 0.68 | 0.66 | 40/41 | 1.9e-11 | 0.87 |" in text
