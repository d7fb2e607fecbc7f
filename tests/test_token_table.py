"""TokenTable: the native exact token -> index table agrees with a dict, and VocabularyLookup with its reference."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import token_table
from sparse_io.token_table import TokenTable
from transforms.beam.lookup import VocabularyLookup


@pytest.fixture(autouse=True, scope="module")
def _native():
    assert token_table.available(), "a C++ compiler builds the table on every CI machine"


def _reference(tokens, probes):
    first = {}
    for i, t in enumerate(tokens):
        first.setdefault(t, i)
    return [first.get(p, -1) for p in probes]


_TEXT = st.text(alphabet=st.sampled_from("ab\x00é日\n"), max_size=20)


@settings(max_examples=80, deadline=None)
@given(st.lists(_TEXT, max_size=40), st.lists(_TEXT, max_size=60),
       st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]))
def test_lookup_equals_a_dict_for_any_tokens_and_probes(tokens, probes, probe_type):
    table = TokenTable(pa.array(tokens, pa.string()))
    if probe_type in (pa.binary(), pa.large_binary()):
        values = pa.array([p.encode() for p in probes], probe_type)
    else:
        values = pa.array(probes, probe_type)
    assert table.lookup(values).tolist() == _reference(tokens, probes)


def test_many_tokens_with_shared_prefixes_and_sliced_probes():
    rng = np.random.default_rng(5)
    tokens = [f"{v:08x}" for v in rng.choice(1 << 32, 200_000, replace=False)] + ["", "x" * 1000, "x" * 1001]
    probes = tokens[::7] + [f"{v:08x}" for v in rng.integers(0, 1 << 32, 50_000)] + ["x" * 999, ""]
    table = TokenTable(pa.array(tokens, pa.large_string()))
    values = pa.array(["pad"] * 3 + probes + ["pad"], pa.string()).slice(3, len(probes))
    assert table.lookup(values).tolist() == _reference(tokens, probes)
    assert len(table) == len(tokens)


def test_empty_table_and_empty_probes():
    assert TokenTable(pa.array([], pa.string())).lookup(pa.array(["a", ""])).tolist() == [-1, -1]
    assert TokenTable(pa.array(["a"])).lookup(pa.array([], pa.string())).tolist() == []


def test_nulls_are_refused():
    with pytest.raises(ValueError, match="null"):
        TokenTable(pa.array(["a", None]))
    with pytest.raises(ValueError, match="null"):
        TokenTable(pa.array(["a"])).lookup(pa.array([None, "a"]))


@settings(max_examples=40, deadline=None)
@given(st.lists(_TEXT.filter(lambda t: t and "\n" not in t), unique=True, max_size=30), st.lists(_TEXT, max_size=50),
       st.integers(1, 4))
def test_vocabulary_lookup_gives_its_reference_indices(tokens, probes, num_oov):
    values = pa.array(probes, pa.string())
    native = VocabularyLookup(tokens, num_oov, oov_method="farmhash")(values, "f")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(token_table, "available", lambda: False)
        reference = VocabularyLookup(tokens, num_oov, oov_method="farmhash")(values, "f")
    np.testing.assert_array_equal(native, reference)
