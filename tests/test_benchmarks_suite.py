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


def test_quick_run_says_when_tf_transform_is_missing_and_still_times_the_small_ingest(quick_run):
    from benchmarks.vocabulary import tft_available

    output, done = quick_run
    report = json.loads((output / "results.json").read_text())
    rows = [row["what"] for row in report["rows"] if row["benchmark"] == "vocabulary"]
    assert "10,000-row local ingest (hashing, Parquet), whole process" in rows
    if tft_available():
        assert "26 vocabularies, 20,000 Criteo rows -> TFRecord shards" in rows
    else:
        assert "tensorflow_transform is not importable" in done.stdout
        assert not [what for what in rows if "vocabularies" in what]


def _write_vocab(directory, name, tokens):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.txt").write_text("".join(f"{t}\n" for t in tokens))


def test_vocabularies_are_checked_against_the_counts_and_tie_orders_are_named(tmp_path):
    from benchmarks.vocabulary import _CATS, compare_vocabularies

    counts = {name: {"a": 3, "b": 1, "c": 1} for name in _CATS}
    for name in _CATS:
        _write_vocab(tmp_path / "asc", name, ["a", "b", "c"])
        _write_vocab(tmp_path / "desc", name, ["a", "c", "b"])
        # C1 out of count order, C2 missing a token: both must be flagged.
        _write_vocab(tmp_path / "bad", name, {"C1": ["b", "a", "c"], "C2": ["a", "b"]}.get(name, ["a", "b", "c"]))
    report = compare_vocabularies(counts, {c: str(tmp_path / c) for c in ("asc", "desc", "bad")})
    assert report["asc"] == {"features_differing": [], "tie_order": "ascending", "sizes": dict.fromkeys(_CATS, 3)}
    assert report["desc"]["tie_order"] == "descending" and not report["desc"]["features_differing"]
    assert report["bad"]["features_differing"] == ["C1", "C2"]


def test_reference_counts_read_the_log_without_our_readers(tmp_path):
    from benchmarks.vocabulary import reference_counts

    cats = ["x"] * 26
    lines = ["\t".join(["1"] + [""] * 13 + cats), "\t".join(["0"] + ["5"] * 13 + ["y"] + [""] * 25)]
    log = tmp_path / "log.tsv"
    log.write_text("\n".join(lines) + "\n")
    counts = reference_counts(str(log))
    assert counts["C1"] == {"x": 1, "y": 1}
    assert counts["C2"] == {"x": 1}  # the empty field is missing, not a token


def test_merge_keeps_other_benchmarks_and_replaces_the_named_ones(tmp_path):
    from benchmarks.__main__ import merge_into_previous

    env = {"cpu": "c", "cores": 2, "cores_usable": 2, "ram_gib": 8.0, "load_average_at_start": [1.0, 1.0, 1.0],
           "os": "os", "versions": {"python": "3"}, "date": "then", "commit": "aaa"}
    previous = {
        "quick": False, "environment": env, "seconds": 900.0,
        "runs": [{"name": "beam_ingest", "seconds": 70.0, "sizes": "s"}, {"name": "vocabulary", "seconds": 5.0,
                                                                         "sizes": "old"}],
        "rows": [{"benchmark": "beam_ingest", "what": "keep"}, {"benchmark": "vocabulary", "what": "old"}],
        "plots": [], "plot_notes": [], "results": {"beam_ingest": {"k": 1}, "vocabulary": {"k": 0}},
    }
    (tmp_path / "results.json").write_text(json.dumps(previous))
    fresh = {
        "quick": False, "environment": dict(env, date="now", commit="bbb"), "seconds": 60.0,
        "runs": [{"name": "vocabulary", "seconds": 60.0, "sizes": "new"}],
        "rows": [{"benchmark": "vocabulary", "what": "new"}], "plots": [], "plot_notes": [],
        "results": {"vocabulary": {"k": 2}},
    }
    merged = merge_into_previous(fresh, str(tmp_path / "results.json"))
    assert [r["what"] for r in merged["rows"]] == ["keep", "new"]
    assert merged["results"] == {"beam_ingest": {"k": 1}, "vocabulary": {"k": 2}}
    assert merged["environment"]["date"] == "then" and merged["seconds"] == 900.0
    vocabulary_run = merged["runs"][1]
    assert vocabulary_run["sizes"] == "new" and vocabulary_run["environment"]["commit"] == "bbb"
    text = results_markdown(dict(merged, rows=[]))
    assert "- vocabulary (60 s): new; run separately on now at commit bbb" in text
    assert "- beam_ingest (70 s): s\n" in text
