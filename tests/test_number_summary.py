"""The native float32 summary against numpy, and the analysis giving the same parameters on either path."""

import numpy as np
import pyarrow as pa
import pytest

from sparse_io import number_summary
from sparse_io.number_summary import float32_summary

pytestmark = pytest.mark.skipif(not number_summary.native_available(), reason="no C++ compiler here")


def _reference(array: pa.Array):
    values = array.to_numpy(zero_copy_only=False).astype(np.float32)
    present = values[~np.isnan(values)].astype(np.float64)  # nulls came back as NaN
    with np.errstate(invalid="ignore", over="ignore"):  # infinities: compared only where all are finite
        mean = present.mean() if present.size else 0.0
        return present, mean, ((present - mean) ** 2).sum()


@pytest.mark.parametrize("seed", range(6))
def test_it_gives_numpys_summary(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20000))
    values = {0: rng.lognormal(2, 1.5, n).round(), 1: rng.normal(0, 1e6, n), 2: rng.integers(-3, 3, n) * 0.0,
              3: rng.standard_cauchy(n), 4: np.full(n, 7.5), 5: rng.uniform(-1, 1, n)}[seed].astype(np.float32)
    values[rng.random(n) < 0.1] = np.nan
    values[rng.random(n) < 0.01] = np.inf if seed % 2 else -np.inf
    mask = rng.random(n) < 0.15
    array = pa.array(values, mask=mask)
    sliced = array.slice(int(rng.integers(0, max(1, n // 3))))
    for column in (array, sliced):
        present, mean, m2 = _reference(column)
        got = float32_summary(column)
        assert got.count == present.size
        np.testing.assert_array_equal(got.sorted, np.sort(present.astype(np.float32)))
        if np.isfinite(present).all():
            assert got.mean == pytest.approx(mean, rel=1e-12, abs=1e-12)
            assert got.m2 == pytest.approx(m2, rel=1e-9, abs=1e-9)
        assert (got.low, got.high) == (present.min(), present.max())


def test_negative_zero_is_zero_and_an_empty_column_has_no_values():
    got = float32_summary(pa.array([-0.0, 0.0, None, float("nan")], pa.float32()))
    assert got.count == 2 and not np.signbit(got.sorted).any()
    assert float32_summary(pa.array([None, float("nan")], pa.float32())).count == 0
    assert float32_summary(pa.array([], pa.float32())).count == 0
    with pytest.raises(ValueError, match="needs a float32 column"):
        float32_summary(pa.array([1.0]))


def test_the_analysis_gives_the_same_parameters_on_either_path(monkeypatch):
    from transforms.beam.derived import SourceSummary

    rng = np.random.default_rng(3)
    batches = []
    for _ in range(12):
        values = rng.lognormal(2, 1.2, 6000).round(1).astype(np.float32)
        values[rng.random(6000) < 0.2] = np.nan
        batches.append(pa.array(values, mask=rng.random(6000) < 0.05))
    native = SourceSummary(True)
    for b in batches:
        native.add(b)
    monkeypatch.setattr(number_summary, "native_available", lambda: False)
    reference = SourceSummary(True)
    for b in batches:
        reference.add(b)
    assert native.count == reference.count and (native.low, native.high) == (reference.low, reference.high)
    assert native.mean == pytest.approx(reference.mean, rel=1e-12)
    assert native.std == pytest.approx(reference.std, rel=1e-9)
    qs = np.arange(1, 20) / 20
    np.testing.assert_array_equal(native.sketch.quantiles(qs), reference.sketch.quantiles(qs))
