"""The graph re-batcher: uneven input batches to exact batch sizes, rows and ragged values intact."""

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.tfdata.logs.rebatch import rebatch


def _elements(chunks):
    """Chunks of rows (lists of id lists) as batches {"row": [n] int64, "ids": [n, None]}."""
    start = 0
    for chunk in chunks:
        lengths = [len(r) for r in chunk]
        yield {
            "row": tf.range(start, start + len(chunk), dtype=tf.int64),
            "ids": tf.RaggedTensor.from_row_lengths(
                tf.constant([v for r in chunk for v in r], tf.int64), tf.constant(lengths, tf.int64)
            ),
        }
        start += len(chunk)


SPEC = {"row": tf.TensorSpec([None], tf.int64), "ids": tf.RaggedTensorSpec([None, None], tf.int64, 1, tf.int64)}


def _dataset(chunks):
    return tf.data.Dataset.from_generator(lambda: _elements(chunks), output_signature=SPEC)


class _Fed:
    """One traced re-batching pipeline per (batch_size, drop), fed new chunks per example."""

    def __init__(self):
        self.chunks = []
        self.pipelines = {}

    def run(self, chunks, batch_size, drop):
        self.chunks = chunks
        key = (batch_size, drop)
        if key not in self.pipelines:
            source = tf.data.Dataset.from_generator(lambda: _elements(self.chunks), output_signature=SPEC)
            self.pipelines[key] = rebatch(source, batch_size, drop_remainder=drop)
        return list(self.pipelines[key])


FED = _Fed()


@settings(max_examples=12)
@given(
    chunks=st.lists(st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=6), max_size=5),
    batch_size=st.sampled_from([1, 2, 5]),
    drop=st.booleans(),
)
def test_rows_come_out_in_order_in_batches_of_exactly_batch_size(chunks, batch_size, drop):
    rows = [r for c in chunks for r in c]
    out = FED.run(chunks, batch_size, drop)
    sizes = [int(b["row"].shape[0]) for b in out]
    full, rest = divmod(len(rows), batch_size)
    assert sizes == [batch_size] * full + ([rest] if rest and not drop else [])
    got_rows = [int(v) for b in out for v in b["row"].numpy()]
    got_ids = [r for b in out for r in b["ids"].to_list()]
    assert got_rows == list(range(len(got_rows)))
    assert got_ids == rows[: len(got_ids)]


def test_each_pass_ends_with_its_own_partial_batch_and_static_shapes_with_drop():
    chunks = [[[1], [2, 3]], [[4]]]
    ds = rebatch(_dataset(chunks), 2, drop_remainder=False).repeat(2)
    assert [b["ids"].to_list() for b in ds] == [[[1], [2, 3]], [[4]], [[1], [2, 3]], [[4]]]
    dropped = rebatch(_dataset(chunks), 2, drop_remainder=True)
    assert dropped.element_spec["row"].shape == [2]
    assert dropped.element_spec["ids"].shape == [2, None]


def test_columns_must_be_vectors_or_simple_ragged():
    ds = tf.data.Dataset.from_tensors({"m": tf.zeros([2, 3])})
    with pytest.raises(ValueError, match="column 'm' must be"):
        rebatch(ds, 2, drop_remainder=False)
