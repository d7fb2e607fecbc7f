"""tf.train.Example encoding, native and numpy: every row parses to the Example a per-row build gives."""

import pyarrow as pa
import pytest
from _batches import SCHEMA, rows, to_batch
from hypothesis import given, settings

from sparse_io import FeatureSpec, Schema, example_encoding
from sparse_io.example_encoding import encode_examples

example_pb2 = pytest.importorskip("tensorflow.core.example.example_pb2")


@pytest.fixture(autouse=True, scope="module", params=["native", "numpy"])
def encoder(request):
    """Every test here runs against the native encoder and against its numpy reference."""
    if request.param == "native":
        assert example_encoding.native_encoder_available(), "a C++ compiler builds the encoder on every CI machine"
        yield request.param
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(example_encoding, "_native", lambda: None)
        yield request.param


def _reference(row) -> "example_pb2.Example":
    """One Example built field by field with the protobuf API, straight from the column contract."""
    example = example_pb2.Example()
    f = example.features.feature
    f["label"].int64_list.value.append(row["label"])
    f["price"].float_list.value.extend([] if row["price"] is None else [row["price"]])
    f["ts"].int64_list.value.extend([] if row["ts"] is None else [row["ts"]])
    # A null list is an empty row.
    f["items"].int64_list.value.extend(row["items"] or [])
    f["items__weights"].float_list.value.extend(row["items__weights"] or [])
    f["cats"].int64_list.value.extend(row["cats"] or [])
    f["tags"].bytes_list.value.extend(t.encode("utf-8") for t in row["tags"] or [])
    return example


@settings(max_examples=40)
@given(rows)
def test_every_row_parses_to_the_reference_example(batch_rows):
    encoded = encode_examples(to_batch(batch_rows), SCHEMA)
    assert len(encoded) == len(batch_rows) and encoded.type == pa.binary()
    for data, row in zip(encoded.to_pylist(), batch_rows):
        parsed = example_pb2.Example.FromString(data)
        reference = _reference(row)
        assert parsed == reference
        # The same canonical encoding (packed lists, empty lists as empty messages).
        assert len(data) == len(reference.SerializeToString(deterministic=True))


def test_varint_boundaries_are_exact():
    values = [0, 1, 127, 128, 300, 2**14 - 1, 2**14, 2**35, 2**63 - 1, -1, -(2**63)]
    schema = Schema([FeatureSpec("ids", "sparse", "int64")])
    batch = pa.record_batch({"ids": pa.array([values], pa.list_(pa.int64()))}, schema=schema.arrow_schema())
    (data,) = encode_examples(batch, schema).to_pylist()
    assert list(example_pb2.Example.FromString(data).features.feature["ids"].int64_list.value) == values


def test_bytes_match_a_deterministic_protobuf_build():
    # protobuf sorts map keys too (it orders a key after any longer key it prefixes, so avoid prefixes).
    schema = Schema(
        [
            FeatureSpec("b", "dense", "float32"),
            FeatureSpec("a", "sparse", "string"),
            FeatureSpec("c", "label"),
        ]
    )
    batch = pa.record_batch(
        {"b": pa.array([1.0, None], pa.float32()), "a": [["x", ""], []], "c": [3, -4]},
        schema=schema.arrow_schema(),
    )
    for data, row in zip(encode_examples(batch, schema).to_pylist(), batch.to_pylist()):
        ref = example_pb2.Example()
        ref.features.feature["b"].float_list.value.extend([] if row["b"] is None else [row["b"]])
        ref.features.feature["a"].bytes_list.value.extend(t.encode() for t in row["a"])
        ref.features.feature["c"].int64_list.value.append(row["c"])
        assert data == ref.SerializeToString(deterministic=True)


def test_sliced_batches_encode_their_own_rows():
    batch_rows = [
        {"label": i, "items": [i] * i, "items__weights": [0.5] * i, "tags": [str(i)]} for i in range(6)
    ]
    batch = to_batch(batch_rows).slice(2, 3)
    for data, row in zip(encode_examples(batch, SCHEMA).to_pylist(), batch.to_pylist()):
        assert example_pb2.Example.FromString(data) == _reference(row)


def test_empty_batch_gives_no_examples():
    assert len(encode_examples(to_batch([]), SCHEMA)) == 0


def test_null_inside_a_list_and_missing_columns_are_errors():
    schema = Schema([FeatureSpec("ids", "sparse", "int64")])
    batch = pa.record_batch({"ids": pa.array([[1, None]], pa.list_(pa.int64()))})
    with pytest.raises(ValueError, match="feature 'ids': null values inside lists"):
        encode_examples(batch, schema)
    with pytest.raises(ValueError, match="column missing from the batch"):
        encode_examples(batch, SCHEMA)
