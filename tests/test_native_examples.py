"""The native Example encoder gives the numpy reference's bytes, framed or not, on any batch."""

import numpy as np
import pyarrow as pa
import pytest
from _batches import SCHEMA, rows, to_batch
from hypothesis import given, settings

from sparse_io import FeatureSpec, Schema, example_encoding
from sparse_io.tfrecord import encode_tfrecords, frame_records


@pytest.fixture(autouse=True, scope="module")
def _native_encoder():
    assert example_encoding.native_encoder_available(), "a C++ compiler builds the encoder on every CI machine"


def _numpy(batch, schema) -> tuple[pa.Array, bytes]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(example_encoding, "_native", lambda: None)
        framed = encode_tfrecords(batch, schema).tobytes()
        return example_encoding.encode_examples(batch, schema), framed


@settings(max_examples=60, deadline=None)
@given(rows)
def test_native_bytes_equal_the_numpy_reference(batch_rows):
    batch = to_batch(batch_rows)
    examples, framed = _numpy(batch, SCHEMA)
    assert example_encoding.encode_examples(batch, SCHEMA).equals(examples)
    native_framed = encode_tfrecords(batch, SCHEMA).tobytes()
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
        assert encode_tfrecords(part, schema).tobytes() == framed


def test_the_framed_bytes_read_back_as_tensorflow_reads_a_tfrecord_file(tmp_path):
    tf = pytest.importorskip("tensorflow")
    batch = to_batch([{"label": i % 2, "items": list(range(i)), "items__weights": [0.5] * i, "tags": ["t"] * (i % 3)}
                      for i in range(50)])
    path = tmp_path / "part.tfrecord"
    path.write_bytes(encode_tfrecords(batch, SCHEMA).tobytes())
    # TensorFlow checks each frame's length and data CRCs as it reads.
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path)).apply(tf.data.experimental.ignore_errors())]
    strict = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert records == strict == example_encoding.encode_examples(batch, SCHEMA).to_pylist()


def test_without_a_compiler_numpy_encodes_after_one_warning_line(tmp_path):
    import os
    import subprocess
    import sys

    script = (
        "import logging, pyarrow as pa\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from sparse_io import FeatureSpec, Schema, example_encoding, token_table\n"
        "from sparse_io.tfrecord import encode_tfrecords\n"
        "s = Schema([FeatureSpec('label', 'label'), FeatureSpec('ids', 'sparse', 'int64')])\n"
        "b = pa.record_batch({'label': [1, 0], 'ids': [[1, 2], []]}, schema=s.arrow_schema())\n"
        "print(len(encode_tfrecords(b, s)), len(encode_tfrecords(b, s)))\n"
        "print(example_encoding.native_encoder_available(), token_table.available())\n"
    )
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), SPARSEFLOW_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    sizes, flags = done.stdout.split("\n")[:2]
    assert flags == "False False"
    first, second = sizes.split()
    assert first == second and int(first) > 0
    warnings = [line for line in done.stderr.splitlines() if "native I/O helpers unavailable" in line]
    assert len(warnings) == 1, done.stderr
