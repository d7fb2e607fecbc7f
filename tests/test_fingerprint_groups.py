"""group_fingerprints (numpy and Arrow) against a dict: groups in first-met order, counts, positions."""

import numpy as np
import pytest

from sparse_io.fingerprint_groups import group_fingerprints


def _by_dict(values, weights):
    """(groups, counts, first, last) computed with a plain dict, value by value."""
    seen: dict = {}
    for i, value in enumerate(int(v) for v in values):
        count = int(weights[i]) if i < len(weights) else 1
        if value in seen:
            seen[value][0] += count
            seen[value][2] = i
        else:
            seen[value] = [count, i, i]
    groups = list(seen)
    return groups, [seen[g][0] for g in groups], [seen[g][1] for g in groups], [seen[g][2] for g in groups]


CASES = {
    "zipf with weights": lambda rng: (rng.integers(-2**63, 2**63 - 1, 5_000, dtype=np.int64)[rng.zipf(1.3, 40_000)
                                                                                              % 5_000],
                                      rng.integers(1, 1_000_000, 3_000)),
    "all distinct": lambda rng: (rng.integers(-2**63, 2**63 - 1, 10_000, dtype=np.int64), None),
    "one value": lambda rng: (np.full(1_000, -7, np.int64), np.array([5, 0, 2**40])),
    "uint64 above 2**63": lambda rng: (np.array([2**64 - 1, 0, 2**63, 2**64 - 1], np.uint64), None),
    "slots that collide": lambda rng: ((np.arange(3_000, dtype=np.int64) << 40), None),  # equal low bits
    "empty": lambda rng: (np.zeros(0, np.int64), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_groups_counts_and_positions_are_those_a_dict_gives(case):
    values, weights = CASES[case](np.random.default_rng(5))
    expected = _by_dict(values.view(np.int64), [] if weights is None else weights)
    got = group_fingerprints(values, weights)
    assert all(a.dtype == np.int64 for a in got)
    assert [a.tolist() for a in got] == [list(e) for e in expected]


def test_bad_shapes_are_refused_naming_the_problem():
    with pytest.raises(ValueError, match="1-D"):
        group_fingerprints(np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match="3 weights for 2 values"):
        group_fingerprints(np.zeros(2, np.int64), np.ones(3, np.int64))
