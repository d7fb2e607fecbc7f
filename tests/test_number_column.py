"""NumberColumn (the zero-copy read of a number column) and the maps over it, on the layouts Arrow hands over.

Sliced arrays (a non-zero offset into shared buffers), chunked arrays, NaN, nulls and all-null columns: the
bucket ids and scaled values equal a reference computed here from the Python values (numpy searchsorted on
float32 boundaries, float64 arithmetic), so the zero-copy path cannot read the wrong slots.
"""

import numpy as np
import pyarrow as pa
import pytest

from sparse_io.numeric_maps import BucketizeSpec, NumberColumn, ScaleSpec

VALUES = [5, None, -3, 40, 17, None, 2**33, 0, 18, 99, None, 7]
BOUNDARIES = (0.0, 18.0, 50.0)


def _reference_ids(values):
    out = []
    for v in values:
        present = v is not None and not (isinstance(v, float) and np.isnan(v))
        out.append([sum(np.float32(v) >= np.float32(b) for b in BOUNDARIES)] if present else [])
    return out


def _reference_z(values, mean, std):
    return [None if v is None or (isinstance(v, float) and np.isnan(v))
            else float(np.float32((float(v) - mean) / std)) for v in values]


def _layouts(values, arrow_type):
    whole = pa.array([99, 98, *values, 97], arrow_type)
    yield "sliced", whole.slice(2, len(values)), values
    half = len(values) // 2
    yield "chunked", pa.chunked_array([pa.array(values[:half], arrow_type), pa.array(values[half:], arrow_type)]), \
        values
    yield "plain", pa.array(values, arrow_type), values


@pytest.mark.parametrize("arrow_type", [pa.int64(), pa.int32(), pa.float64(), pa.float32()])
def test_maps_of_sliced_and_chunked_columns_equal_the_reference(arrow_type):
    values = VALUES if pa.types.is_integer(arrow_type) and arrow_type.bit_width == 64 else \
        [v if v is None or abs(v) < 2**31 else 12345 for v in VALUES]
    if pa.types.is_floating(arrow_type):
        values = [*values, float("nan"), 2.5]
    for layout, column, vals in _layouts(values, arrow_type):
        ids = BucketizeSpec(BOUNDARIES).apply_arrow(column)
        assert ids.type == pa.list_(pa.int64()) and ids.null_count == 0, layout
        assert ids.to_pylist() == _reference_ids(vals), layout
        z = ScaleSpec("z_score", mean=10.0, std=4.0).apply_arrow(column)
        assert z.type == pa.float32(), layout
        assert z.to_pylist() == _reference_z(vals, 10.0, 4.0), layout


def test_one_read_serves_several_maps_and_the_present_values():
    column = pa.array(VALUES, pa.int64()).slice(1, 8)
    read = NumberColumn.of(column)
    assert read.count == 6 and read.present.tolist() == [v is not None for v in VALUES[1:9]]
    assert read.present_values().tolist() == [float(v) for v in VALUES[1:9] if v is not None]
    assert BucketizeSpec(BOUNDARIES).apply_arrow(read).to_pylist() == _reference_ids(VALUES[1:9])
    assert ScaleSpec("min_max", low=-3.0, high=40.0).apply_arrow(read).to_pylist() == [
        None if v is None else float(np.float32((v + 3.0) / 43.0)) for v in VALUES[1:9]]


def test_all_null_and_log1p_out_of_domain_are_missing():
    empty = pa.array([None, None, None], pa.int64())
    assert BucketizeSpec(BOUNDARIES).apply_arrow(empty).to_pylist() == [[], [], []]
    assert ScaleSpec("z_score", mean=1.0, std=2.0).apply_arrow(empty).to_pylist() == [None, None, None]
    assert NumberColumn.of(empty).present_values().size == 0
    logged = ScaleSpec("log1p").apply_arrow(pa.array([-2.0, None, 0.0, float("nan"), -1.0, 3.0]).slice(0, 6))
    assert logged.to_pylist() == [None, None, 0.0, None, None, float(np.float32(np.log1p(3.0)))]
    assert logged.null_count == 4


def test_a_text_column_is_refused():
    with pytest.raises(ValueError, match="number column"):
        NumberColumn.of(pa.array(["1", "2"]))
