"""The Python-side Parquet reader: exact rows per epoch, re-batching, shuffling, sharding, positions, one copy."""

import math
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import coo
from tfdata_data import SCHEMA, random_rows, reference_coo, to_table, write_parquet_shards

from sparse_io.schema import FeatureSpec, Schema
from transforms.tfdata.columnar.reader import ALIGNMENT, ColumnarSource
from transforms.tfdata.core.columns import select_columns
from transforms.tfdata.core.state import InputState

ROWS = random_rows(97, seed=11)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """97 rows over 4 files (row groups of 5 rows; the last file empty)."""
    directory = tmp_path_factory.mktemp("parquet")
    paths = write_parquet_shards(str(directory), ROWS[:97], 4, row_group_size=5)
    # Make the last file empty: rows 75..96 move to a rewrite of file 2.
    pq.write_table(to_table(ROWS[50:97]), paths[2], row_group_size=5)
    pq.write_table(to_table([]), paths[3])
    return paths


def _source(paths, batch_size, **kwargs):
    columns, label = select_columns(SCHEMA, None, None)
    options = dict(shuffle=False, seed=0, num_shards=1, index=0, drop_remainder=False)
    options.update(kwargs)
    return ColumnarSource(paths, columns, label, batch_size, **options)


def _rows(flat):
    """Flat arrays of one batch back to row dicts (layout: user group, items group, price block, label, position)."""
    user_splits, user, items_splits, items, weights, price, label, _, _ = flat
    out = []
    for r in range(len(label)):
        p = float(price[r])
        lo, hi = items_splits[r], items_splits[r + 1]
        out.append(
            {
                "label": int(label[r]),
                "price": None if math.isnan(p) else p,
                "user": user[user_splits[r] : user_splits[r + 1]].tolist(),
                "items": items[lo:hi].tolist(),
                "items__weights": weights[lo:hi].tolist(),
            }
        )
    return out


def _epochs(source, num_epochs=1):
    batches = [source.read(i) for i in range(source.num_batches(num_epochs))]
    return batches, [row for b in batches for row in _rows(b)]


@settings(max_examples=25)
@given(batch_size=st.integers(1, 40), shuffle=st.booleans(), drop=st.booleans())
def test_every_row_comes_out_once_per_epoch_intact(shards, batch_size, shuffle, drop):
    source = _source(shards, batch_size, shuffle=shuffle, seed=5, drop_remainder=drop)
    batches, rows = _epochs(source, num_epochs=2)
    sizes = [len(b[-3]) for b in batches]
    per_epoch = 97 // batch_size if drop else math.ceil(97 / batch_size)
    assert len(batches) == 2 * per_epoch
    last = batch_size if drop else 97 - (per_epoch - 1) * batch_size
    assert sizes == ([batch_size] * (per_epoch - 1) + [last]) * 2
    for epoch in range(2):
        got = rows[epoch * len(rows) // 2 : (epoch + 1) * len(rows) // 2]
        if drop:
            assert len(got) == per_epoch * batch_size
            assert len({r["label"] for r in got}) == len(got)
            assert all(r == ROWS[r["label"]] for r in got)
        else:
            assert sorted(got, key=lambda r: r["label"]) == ROWS
    if not shuffle:
        assert [r["label"] for r in rows[: len(rows) // 2]] == list(range(len(rows) // 2))


def test_shuffle_is_reproducible_from_the_seed_and_differs_between_epochs(shards):
    first = [r["label"] for r in _epochs(_source(shards, 10, shuffle=True, seed=1), 2)[1]]
    again = [r["label"] for r in _epochs(_source(shards, 10, shuffle=True, seed=1), 2)[1]]
    other = [r["label"] for r in _epochs(_source(shards, 10, shuffle=True, seed=2), 2)[1]]
    assert first == again and first != other
    assert first[:97] != first[97:] and sorted(first[:97]) == sorted(first[97:]) == list(range(97))


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize("files", [1, 3])
def test_workers_read_disjoint_rows_whose_union_is_the_data(shards, workers, files):
    paths = shards[:files] if files == 3 else [shards[2]]
    expected = sorted(r["label"] for r in (ROWS if files == 3 else ROWS[50:97]))
    seen = []
    for index in range(workers):
        source = _source(paths, 7, shuffle=True, seed=3, num_shards=workers, index=index)
        labels = [r["label"] for r in _epochs(source)[1]]
        assert labels, f"worker {index} read nothing"
        seen += labels
        assert source.mode == ("files" if files >= workers else "rows")
    assert sorted(seen) == expected


def test_positions_resume_exactly_where_a_batch_ended(shards):
    whole = [r["label"] for r in _epochs(_source(shards, 8, shuffle=True, seed=4), 2)[1]]
    source = _source(shards, 8, shuffle=True, seed=4)
    for i in (0, 5, 11, 12, 20):
        state = InputState.from_tensor(source.read(i)[-1])
        resumed = _source(shards, 8, shuffle=True, seed=4, start=state)
        rest = [r["label"] for r in _epochs(resumed, 2)[1]]
        epoch, b = divmod(i, 13)  # 13 batches per epoch: 12 of 8 rows and one of 1
        consumed = epoch * 97 + min(8 * (b + 1), 97)
        assert rest == whole[consumed:]
    # a different resume batch size continues from the same row
    state = InputState.from_tensor(source.read(3)[-1])
    rest = [r["label"] for r in _epochs(_source(shards, 5, shuffle=True, seed=4, start=state), 1)[1]]
    assert rest == whole[32:97]


def test_a_state_from_another_plan_is_refused(shards):
    state = InputState.from_tensor(_source(shards, 8, shuffle=True, seed=4).read(2)[-1])
    with pytest.raises(ValueError, match="another reading plan"):
        _source(shards, 8, shuffle=True, seed=5, start=state)
    with pytest.raises(ValueError, match="another reading plan"):
        _source(shards, 8, shuffle=True, seed=4, num_shards=2, index=0, start=state)


def test_batch_arrays_are_aligned_and_ids_are_copied_once(tmp_path):
    rows = random_rows(6000, seed=2)
    path = str(tmp_path / "one.parquet")
    pq.write_table(to_table(rows), path, row_group_size=6000)  # one row group: no read-ahead
    source = _source([path], 2500)
    source.read(0)  # decode the row group outside the measurement
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        flat = source.read(1)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    numeric = flat[:-2]
    assert all(a.ctypes.data % ALIGNMENT == 0 and a.flags.writeable for a in numeric)
    payload = sum(a.nbytes for a in numeric)
    # One allocation holds every column once (plus alignment padding); nothing else of that size.
    assert payload <= peak <= payload + ALIGNMENT * (len(numeric) + 1) + 16_384


def test_missing_or_mistyped_columns_name_the_file_and_column(tmp_path):
    path = str(tmp_path / "bad.parquet")
    table = to_table(random_rows(5)).drop_columns(["items__weights"])
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"bad.parquet: column 'items__weights' is missing"):
        _source([path], 4)
    table = to_table(random_rows(5)).set_column(2, "user", pa.array([["x"]] * 5, pa.list_(pa.string())))
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"column 'user' has type list<element: string>, expected list<int64>"):
        _source([path], 4)


def test_a_worker_with_less_than_one_batch_under_drop_remainder_is_refused(shards):
    with pytest.raises(ValueError, match="fewer than one batch"):
        _source(shards, 200, drop_remainder=True)
    with pytest.raises(ValueError, match="some worker would read nothing"):
        _source([shards[0]], 4, num_shards=30, index=0)


def test_null_lists_are_empty_rows_and_null_prices_are_nan(tmp_path):
    path = str(tmp_path / "nulls.parquet")
    table = pa.table(
        {
            "label": pa.array([0, 1], pa.int64()),
            "price": pa.array([None, 2.5], pa.float32()),
            "user": pa.array([None, [4]], pa.list_(pa.int64())),
            "items": pa.array([[1, 2], None], pa.list_(pa.int64())),
            "items__weights": pa.array([[0.5, 1.5], None], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, path)
    got = _rows(_source([path], 2).read(0))
    assert got == [
        {"label": 0, "price": None, "user": [], "items": [1, 2], "items__weights": [0.5, 1.5]},
        {"label": 1, "price": 2.5, "user": [4], "items": [], "items__weights": []},
    ]
    assert np.isnan(_source([path], 2).read(0)[5][0])


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "from-buffers"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_coo_batches_follow_the_contract_for_the_rows_they_hold(shards, shuffle, native):
    source = _source(shards, 13, shuffle=shuffle, seed=6, coo={"user": "sum", "items": "mean"}, native=native)
    if native and not source.native:
        pytest.skip("the native kernels do not load here")
    for i in range(source.num_batches(1)):
        flat = source.read(i)
        batch = [ROWS[int(y)] for y in flat[9]]  # label after two groups of 4 arrays and the price block
        for g, (name, weighted) in enumerate((("user", False), ("items", True))):
            rows, cols, gains, counts = flat[4 * g : 4 * g + 4]
            want_rows, want_cols, want_gains = reference_coo(batch, name, weighted, "mean" if weighted else "sum")
            assert counts.tolist() == [len(want_rows)]
            assert rows.tolist() == want_rows and cols.tolist() == want_cols
            np.testing.assert_allclose(gains, want_gains, rtol=1e-5)
            assert rows.ctypes.data % ALIGNMENT == 0 and cols.ctypes.data % ALIGNMENT == 0


ONE_HOT = Schema(
    [FeatureSpec("label", "label", "int64")]
    + [FeatureSpec(f"a{k}", "sparse", "int64") for k in range(3)]
    + [FeatureSpec(f"w{k}", "sparse", "int64", weighted=True) for k in range(3)]
)


def _one_hot_rows(n: int, seed: int, two_ids_at: int | None) -> list[dict]:
    """Rows whose features hold 0 or 1 id (weights include 0 and negatives); row `two_ids_at`,
    if given, holds two distinct ids in w1, so its unit is not one-hot."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n):
        row = {"label": r}
        for name in ONE_HOT.names:
            if name == "label":
                continue
            has = rng.random() < 0.7
            row[name] = [int(rng.integers(0, 100))] if has else []
            if name.startswith("w"):
                row[name + "__weights"] = [float(rng.choice([0.0, -1.5, 0.25, 2.0]))] if has else []
        rows.append(row)
    if two_ids_at is not None:
        rows[two_ids_at]["w1"], rows[two_ids_at]["w1__weights"] = [7, 9], [0.5, 1.5]
    return rows


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("two_ids_at", [None, 23])
@pytest.mark.parametrize("native", [False, True], ids=["numpy", "from-buffers"])
def test_one_hot_groups_give_the_contract_coo_for_every_feature(
    tmp_path, monkeypatch, combiner, shuffle, two_ids_at, native
):
    import transforms.tfdata.columnar.coo_assembly as source_module

    rows = _one_hot_rows(61, seed=5, two_ids_at=two_ids_at)
    paths = []
    for k, part in enumerate((rows[:40], rows[40:])):  # two files, row groups of 7: batches span units
        paths.append(str(tmp_path / f"part-{k}.parquet"))
        pq.write_table(
            pa.table(
                {name: [row[name] for row in part] for name in ONE_HOT.arrow_schema().names},
                schema=ONE_HOT.arrow_schema(),
            ),
            paths[-1],
            row_group_size=7,
        )
    fills = []
    way = source_module._FromBuffers if native else source_module._OneHot
    real_fill = way.fill
    monkeypatch.setattr(way, "fill", lambda self, *a: fills.append(1) or real_fill(self, *a))
    columns, label = select_columns(ONE_HOT, None, None)
    groups = [[f"a{k}" for k in range(3)], [f"w{k}" for k in range(3)]]
    source = ColumnarSource(
        paths,
        columns,
        label,
        9,
        shuffle=shuffle,
        seed=3,
        num_shards=1,
        index=0,
        drop_remainder=False,
        groups=groups,
        coo={c.name: combiner for c in columns if c.is_sparse},
        native=native,
    )
    if native and not source.native:
        pytest.skip("the native kernels do not load here")
    seen = []
    for i in range(source.num_batches(1)):
        flat = source.read(i)
        batch = [rows[int(y)] for y in flat[8]]
        seen += [int(y) for y in flat[8]]
        for g, names in enumerate(groups):
            got_rows, got_cols, got_gains, counts = flat[4 * g : 4 * g + 4]
            want_rows, want_cols, want_gains, want_counts = [], [], [], []
            for name in names:
                weights = [row[name + "__weights"] for row in batch] if name.startswith("w") else None
                want = coo([row[name] for row in batch], weights, combiner)
                want_rows += want.row_ids
                want_cols += want.col_ids
                want_gains += want.gains
                want_counts.append(len(want.row_ids))
            assert counts.tolist() == want_counts
            assert got_rows.tolist() == want_rows and got_cols.tolist() == want_cols
            np.testing.assert_allclose(got_gains, want_gains, rtol=1e-6)
    assert sorted(seen) == list(range(61))
    if native:  # every group of every batch is written from the units' buffers, two ids in a row or not
        assert len(fills) == 2 * source.num_batches(1)
    else:  # every batch of the unweighted group, and of the weighted one away from row 23's unit, is one-hot
        assert len(fills) >= source.num_batches(1) + (
            source.num_batches(1) - 2 if two_ids_at else source.num_batches(1)
        )


def test_reading_with_another_seed_reads_as_a_source_made_with_that_seed(shards):
    # A restored iterator hands the reader the seed it was saved with, which is not the new source's.
    source = _source(shards, 8, shuffle=True, seed=4)
    made_with_9 = _source(shards, 8, shuffle=True, seed=9)
    for i in (0, 5, 12, 13, 25):
        got, want = source.read(i, seed=9), made_with_9.read(i)
        assert _rows(got) == _rows(want)
        np.testing.assert_array_equal(got[-1], want[-1])  # the position, with seed 9's fingerprint
    assert _rows(source.read(3, seed=4)) == _rows(source.read(3)) != _rows(source.read(3, seed=9))
    state = InputState.from_tensor(source.read(2)[-1])
    with pytest.raises(ValueError, match="reads with its own seed"):
        _source(shards, 8, shuffle=True, seed=4, start=state).read(0, seed=9)
