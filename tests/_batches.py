"""Hypothesis strategies for record batches of a small mixed schema (shared by shard tests)."""

import pyarrow as pa
from hypothesis import strategies as st

from sparse_io import FeatureSpec, Schema

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("ts", "dense", "int64"),
        FeatureSpec("items", "sparse", "int64", weighted=True),
        FeatureSpec("cats", "sparse", "int32"),
        FeatureSpec("tags", "sparse", "string"),
    ]
)

_f32 = st.floats(width=32, allow_nan=False)
_ids = st.integers(-(2**63), 2**63 - 1)

_row = st.builds(
    lambda label, price, ts, pairs, cats, tags: {
        "label": label,
        "price": price,
        "ts": ts,
        "items": [i for i, _ in pairs],
        "items__weights": [w for _, w in pairs],
        "cats": cats,
        "tags": tags,
    },
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.none(), _f32),
    st.one_of(st.none(), _ids),
    st.lists(st.tuples(_ids, _f32), max_size=5),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3),
    st.lists(st.text(max_size=6), max_size=3),
)

rows = st.lists(_row, max_size=12)
batches_of_rows = st.lists(rows, max_size=4)  # a list of batches, each a list of rows (may be empty)


def to_batch(batch_rows):
    return pa.RecordBatch.from_pylist(batch_rows, schema=SCHEMA.arrow_schema())
