"""The native Example encoder gives the numpy reference's bytes, framed or not, on any batch."""

import numpy as np
import pyarrow as pa
import pytest
from _batches import SCHEMA, rows, to_batch
from hypothesis import given, settings

from sparse_io import FeatureSpec, Schema, example_encoding
from sparse_io.tfrecord import frame_records


@pytest.fixture(autouse=True, scope="module")
def _native_encoder():
    assert example_encoding.native_encoder_available(), "a C++ compiler builds the encoder on every CI machine"


def _numpy(batch, schema) -> tuple[pa.Array, bytes]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(example_encoding, "_native", lambda: None)
        framed = example_encoding.encode_tfrecords(batch, schema).tobytes()
        return example_encoding.encode_examples(batch, schema), framed


@settings(max_examples=60, deadline=None)
@given(rows)
def test_native_bytes_equal_the_numpy_reference(batch_rows):
    batch = to_batch(batch_rows)
    examples, framed = _numpy(batch, SCHEMA)
    assert example_encoding.encode_examples(batch, SCHEMA).equals(examples)
    native_framed = example_encoding.encode_tfrecords(batch, SCHEMA).tobytes()
    assert native_framed == framed == frame_records(examples)


def _wide_batch(rng, n):
    lengths = rng.integers(0, 6, n)
    ids = np.concatenate([[0, 127, 128, 2**21, 2**63 - 1, -1, -(2**63)], rng.integers(-(2**40), 2**40, 10_000)])
    strings = ["", "a", "é日本", "x" * 200, "y" * 128, "tab\there"]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    total = int(offsets[-1])
    return {
        "label": pa.array(rng.integers(0, 2, n)),
        "ints": pa.ListArray.from_arrays(offsets, pa.array(ids[rng.integers(0, len(ids), total)])),
        "small": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(-5, 5, total).astype(np.int32))),
        "words": pa.ListArray.from_arrays(offsets, pa.array([strings[i] for i in rng.integers(0, 6, total)])),
        "w": pa.ListArray.from_arrays(offsets, pa.array(rng.normal(size=total).astype(np.float32))),
        "price": pa.array(np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n)).astype(np.float32),
                          mask=rng.random(n) < 0.2),
        "count": pa.array(rng.integers(-(2**40), 2**40, n), mask=rng.random(n) < 0.2),
    }


def test_native_bytes_equal_the_numpy_reference_on_every_dtype_and_varint_width():
    schema = Schema([
        FeatureSpec("label", "label"),
        FeatureSpec("ints", "sparse", "int64"),
        FeatureSpec("small", "sparse", "int32"),
        FeatureSpec("words", "sparse", "string"),
        FeatureSpec("w", "sparse", "float32"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("count", "dense", "int64"),
    ])
    rng = np.random.default_rng(7)
    batch = pa.record_batch(_wide_batch(rng, 3000), schema=schema.arrow_schema())
    for part in (batch, batch.slice(1234, 777), batch.slice(0, 0)):
        examples, framed = _numpy(part, schema)
        assert example_encoding.encode_examples(part, schema).equals(examples)
        assert example_encoding.encode_tfrecords(part, schema).tobytes() == framed


def test_the_framed_bytes_read_back_as_tensorflow_reads_a_tfrecord_file(tmp_path):
    tf = pytest.importorskip("tensorflow")
    batch = to_batch([{"label": i % 2, "items": list(range(i)), "items__weights": [0.5] * i, "tags": ["t"] * (i % 3)}
                      for i in range(50)])
    path = tmp_path / "part.tfrecord"
    path.write_bytes(example_encoding.encode_tfrecords(batch, SCHEMA).tobytes())
    # TensorFlow checks each frame's length and data CRCs as it reads.
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path)).apply(tf.data.experimental.ignore_errors())]
    strict = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert records == strict == example_encoding.encode_examples(batch, SCHEMA).to_pylist()
