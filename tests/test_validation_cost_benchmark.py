"""benchmarks.validation_cost: its contenders differ by the validation alone, and the suite turns it into rows."""

import math

import pytest

from benchmarks.suite import BENCHMARKS, data_sizes, normalise


@pytest.mark.slow
def test_a_tiny_run_times_the_ingest_with_and_without_validation_and_gives_suite_rows():
    from benchmarks.validation_cost import run

    result = run(quick=True, rows=2_000, reps=1)
    # The plain ingest really lacks what the validation adds; the others have it, compared with the baseline.
    assert result["checks"]["plain_has_no_validation"]
    assert result["checks"]["raw_values_counted"] and result["checks"]["compared_with"]
    for name in ("plain", "validated", "compared"):
        assert result[name]["reps"] == 1 and result[name]["rows_per_s"] > 0
    plain = result["plain"]["seconds"]["median"]
    assert result["overhead"]["validated_wall"] == pytest.approx((result["validated"]["seconds"]["median"] - plain)
                                                                 / plain)
    # Paired: each rep's own ratio to the plain ingest of that rep (one rep here, so it is the same figure).
    paired = result["paired_overhead"]["validated_wall"]
    assert paired["median"] == pytest.approx(result["overhead"]["validated_wall"])
    assert paired["min"] <= paired["median"] <= paired["max"]
    # The counts' own CPU inside the validated ingest was measured, and is part of that ingest's CPU.
    inside = result["counting_in_ingest"]
    assert 0 < inside["cpu_s"] < result["validated"]["cpu_seconds"]["max"]
    assert "the counts' own CPU inside the ingest" in normalise("validation_cost", result)[0]["limit"]
    assert "validation_cost" in BENCHMARKS
    rows = normalise("validation_cost", result)
    assert len(rows) == 2 and all(math.isfinite(row["ratio"]) and row["ratio"] > 0 for row in rows)
    assert rows[0]["ours"] == pytest.approx(2_000 / result["validated"]["seconds"]["median"])
    assert "target: validation <= 10%" in rows[0]["limit"]
    alone = result["counting_alone"]
    assert alone["rows"] == 2_000 and alone["read_cpu_s"] > 0 and alone["raw_values_cpu_s"] > 0
    assert data_sizes("validation_cost", result).startswith("2,000 Criteo TSV rows")
