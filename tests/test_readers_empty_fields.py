"""An empty text field is a missing value: `empty_to_null` on every layout an Arrow string array can have."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io.readers._convert import empty_to_null


def _expected(values: list) -> list:
    return [None if v in ("", b"") else v for v in values]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.just(""), st.text(max_size=5)), max_size=40),
    st.data(),
)
def test_empty_strings_become_null_in_any_slice(values, data):
    array = pa.array(values, pa.string())
    start = data.draw(st.integers(0, len(values)))
    stop = data.draw(st.integers(start, len(values)))
    out = empty_to_null(array.slice(start, stop - start))
    out.validate(full=True)
    assert out.type == pa.string()
    assert out.to_pylist() == _expected(values[start:stop])


@pytest.mark.parametrize("type_", [pa.string(), pa.binary(), pa.large_string(), pa.large_binary()])
def test_every_string_type_keeps_its_type(type_):
    raw = ["a", "", None, "bc"] if "string" in str(type_) else [b"a", b"", None, b"bc"]
    out = empty_to_null(pa.array(raw, type_))
    assert out.type == type_
    assert out.to_pylist() == _expected(raw)


def test_the_bytes_are_shared_not_copied():
    array = pa.array(["ab", "", "c"])
    out = empty_to_null(array)
    assert out.buffers()[2].address == array.buffers()[2].address
    assert out.null_count == 1


def test_no_empty_field_returns_the_array_itself():
    array = pa.array(["ab", "c"])
    assert empty_to_null(array) is array
