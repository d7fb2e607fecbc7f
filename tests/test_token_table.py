"""TokenTable: the native exact token -> index table agrees with a dict, and VocabularyLookup with its reference."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import token_table
from sparse_io.token_table import TokenCounter, TokenTable
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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_TEXT, max_size=40), max_size=6),
       st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]))
def test_counter_counts_like_a_counter_in_first_seen_order(batches, value_type):
    import collections

    counter = TokenCounter()
    reference: collections.Counter = collections.Counter()
    for batch in batches:
        encoded = [t.encode() for t in batch] if value_type in (pa.binary(), pa.large_binary()) else batch
        counter.add(pa.array(encoded, value_type))
        reference.update(encoded)
    large = pa.large_binary() if value_type in (pa.binary(), pa.large_binary()) else pa.large_string()
    table = counter.table(large)
    assert table.column("value").type == large and len(counter) == len(reference)
    assert dict(zip(table.column("value").to_pylist(), table.column("count").to_pylist())) == dict(reference)
    assert table.column("value").to_pylist() == list(reference)  # Counter keeps first-seen order too


def test_counter_grows_past_many_distinct_tokens():
    rng = np.random.default_rng(9)
    ids = rng.zipf(1.3, 300_000) % 150_000
    tokens = np.char.add("t", ids.astype(str))
    counter = TokenCounter()
    for part in np.array_split(tokens, 7):
        counter.add(pa.array(part.tolist()).slice(0))
    table = counter.table(pa.large_string())
    got = dict(zip(table.column("value").to_pylist(), table.column("count").to_pylist()))
    values, counts = np.unique(tokens, return_counts=True)
    assert got == dict(zip(values.tolist(), counts.tolist()))


@pytest.mark.parametrize("native", [True, False])
def test_count_tables_of_strings_merge_and_pickle_alike_with_and_without_the_counter(native, monkeypatch):
    import collections
    import pickle

    from transforms.beam._counts import CountTable

    if not native:
        monkeypatch.setattr(token_table, "available", lambda: False)
    rng = np.random.default_rng(4)
    reference: collections.Counter = collections.Counter()
    tables = [CountTable() for _ in range(3)]
    for i in range(24):
        ids = rng.zipf(1.4, int(rng.integers(0, 3000))) % 5000
        values = np.char.add("id-", ids.astype(str)).tolist()
        tables[i % 3].add(pa.array(values, pa.large_string() if i % 2 else pa.string()))
        reference.update(values)
    tables[1] = pickle.loads(pickle.dumps(tables[1]))
    tables[0].merge(tables[1])
    tables[0].merge(tables[2])
    got = tables[0].sorted()
    expected = sorted(reference.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(got.column("value").to_pylist(), got.column("count").to_pylist())) == expected
    assert tables[0].total() == sum(reference.values())
