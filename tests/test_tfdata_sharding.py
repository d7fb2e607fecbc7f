"""Worker sharding plans: disjoint, complete, never empty (pure Python, no TensorFlow)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.tfdata.core.sharding import Unit, plan_units, resolve_worker, split_files


def _rows_of(units, row_groups):
    """Global row numbers covered by units, from the row-group sizes."""
    starts = {}
    offset = 0
    for f, groups in enumerate(row_groups):
        for g, rows in enumerate(groups):
            starts[(f, g)] = offset
            offset += rows
    out = []
    for u in units:
        assert 0 <= u.start < u.stop <= row_groups[u.file][u.row_group]
        base = starts[(u.file, u.row_group)]
        out.extend(range(base + u.start, base + u.stop))
    return out


@given(
    row_groups=st.lists(st.lists(st.integers(0, 9), min_size=0, max_size=4), min_size=1, max_size=6),
    workers=st.integers(1, 5),
)
def test_every_row_goes_to_exactly_one_worker_and_none_is_empty(row_groups, workers):
    total = sum(map(sum, row_groups))
    if total == 0:  # an empty output: every worker reads nothing
        assert [plan_units(row_groups, workers, index)[0] for index in range(workers)] == [[]] * workers
        return
    if total < workers:
        with pytest.raises(ValueError, match="some worker would read nothing"):
            plan_units(row_groups, workers, 0)
        return
    seen = []
    for index in range(workers):
        units, mode = plan_units(row_groups, workers, index)
        rows = _rows_of(units, row_groups)
        assert rows, f"worker {index} got nothing"
        seen.extend(rows)
    assert sorted(seen) == list(range(total))


def test_whole_files_when_every_worker_can_get_one():
    units, mode = plan_units([[3, 2], [4], [1]], 3, 1)
    assert mode == "files"
    assert units == [Unit(1, 0, 0, 4)]


def test_row_ranges_when_files_are_too_few():
    groups = [[5, 5]]
    plans = [plan_units(groups, 3, i) for i in range(3)]
    assert {mode for _, mode in plans} == {"rows"}
    assert [[(u.row_group, u.start, u.stop) for u in units] for units, _ in plans] == [
        [(0, 0, 3)],
        [(0, 3, 5), (1, 0, 1)],
        [(1, 1, 5)],
    ]


def test_empty_files_do_not_count_as_files_to_give_out():
    assert split_files([True, False, True], 3, 0) is None
    assert split_files([True, False, True, True], 3, 1) == [2]


def test_resolve_worker_from_an_input_context_or_explicit_values():
    class Context:
        num_input_pipelines = 4
        input_pipeline_id = 3

    assert resolve_worker(Context()) == (4, 3)
    assert resolve_worker(num_shards=2, index=0) == (2, 0)
    assert resolve_worker() == (1, 0)
    with pytest.raises(ValueError, match="not both"):
        resolve_worker(Context(), num_shards=2, index=0)
    with pytest.raises(ValueError, match="go together"):
        resolve_worker(num_shards=2)
    with pytest.raises(ValueError, match=r"index must be in \[0, 2\)"):
        resolve_worker(num_shards=2, index=2)
