"""The embedding-bag cases both the CPU emulation tests and the GPU's sanitizer run take, so they cannot drift.

`tests/test_cuda_emulation_embedding_bag.py` runs every case here on the emulation; `benchmarks.gpu_kernel_sanitized`
runs the same cases (same names, same data: each case's generator is seeded from its name) on a GPU under
compute-sanitizer. Cases:

- forward (`FORWARD_CASES`, with the rows_sorted modes `forward_modes` gives) and gradient (`GRAD_CASES`):
  odd dims, empty bags, padding, bad ids and rows, long bags (longer than the read-ahead), a hot id, very hot ids
  (thousands of entries: longer than one chunk of the segment-length-aware backward, two long ids sharing a chunk,
  ids of exactly one chunk and one more), unsorted rows, no entries;
- the entry check (`CHECK_CASES`): (rows, ids, sample_count, vocab).

Example:
    bag = bag_case("very hot id")
    bag.n, bag.dim        # (3108, 8)
    forward_modes("unsorted rows, padding")  # (0, -1)
"""

from __future__ import annotations

import zlib

import numpy as np

from benchmarks.gpu_kernel_data import Bag

__all__ = ["CHECK_CASES", "FORWARD_CASES", "GRAD_CASES", "HOT_IDS", "SORTED_CASES", "bag_case", "check_case",
           "forward_modes"]

# Very hot id cases: entries given to ids (id -> count) on top of random ids; chunks are max(256, dim) entries.
HOT_IDS = {
    "very hot id": (8, {5: 2100, 6: 300, 7: 256, 8: 257}),
    "very hot id, dim 5": (5, {3: 900, 4: 257, 9: 256}),
    "very hot id, dim 260": (260, {2: 1000, 3: 261, 4: 260}),
}


def _hot_bag(rng, name: str) -> Bag:
    dim, hot = HOT_IDS[name]
    n_hot = sum(hot.values())
    bag = Bag(rng, 300, 40, dim, 2 * (n_hot + 300) // 300, padding=9)
    while bag.n - 9 < n_hot + 100:  # enough entries for the hot ids plus some random ones
        bag = Bag(rng, 300, 40, dim, 2 * (n_hot + 300) // 300, padding=9)
    real = rng.permutation(bag.n - 9)  # padding (the last 9 entries) keeps id 0
    others = np.array([i for i in range(bag.vocab) if i not in hot])
    bag.cols[: bag.n - 9] = rng.choice(others, bag.n - 9)
    start = 0
    for col, count in hot.items():
        bag.cols[real[start : start + count]] = col
        start += count
    return bag


def bag_case(name: str) -> Bag:
    """The bag of case `name` (a fresh copy; the generator is seeded from the name).

    Raises:
      KeyError: an unknown case.
    """
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if name == "odd sizes, empty bags, padding":
        return Bag(rng, 37, 50, 12, 6, padding=5)
    if name == "dim 3":
        return Bag(rng, 29, 20, 3, 4, padding=2)
    if name == "wide odd rows":  # more values than a warp has lanes: every lane strides, all 32 shares count
        return Bag(rng, 13, 25, 67, 4, padding=2)
    if name == "wide rows":
        return Bag(rng, 7, 25, 200, 4)
    if name == "hot id":
        bag = Bag(rng, 9, 40, 8, 120)
        bag.cols[: bag.n * 2 // 3] = 17  # one id in most entries, across blocks of the grid
        return bag
    if name in HOT_IDS:
        return _hot_bag(rng, name)
    if name == "long bags, bad ids":  # bags longer than the 8 entries read ahead, bad ids inside a read-ahead group
        bag = Bag(rng, 21, 50, 12, 37, padding=4)
        bag.cols[[3, 17, 40]] = [50, -1, 999]
        return bag
    if name == "bad ids and rows":
        bag = Bag(rng, 11, 30, 8, 5, padding=3)
        bag.cols[[1, 4]] = [30, -2]  # ids outside [0, vocab): skipped, never read
        bag.rows[0] = -1  # a row before the first sample: skipped
        return bag
    if name == "unsorted rows, padding":
        return Bag(rng, 33, 30, 16, 5, padding=7, shuffle=True)
    if name == "no entries":
        return Bag(rng, 4, 10, 8, 0)
    if name == "only padding":
        return Bag(rng, 3, 10, 4, 0, padding=6)
    raise KeyError(name)


SORTED_CASES = [
    "odd sizes, empty bags, padding", "dim 3", "wide odd rows", "wide rows", "hot id", *HOT_IDS, "long bags, bad ids",
    "bad ids and rows", "no entries", "only padding",
]
FORWARD_CASES = [*SORTED_CASES, "unsorted rows, padding"]
GRAD_CASES = [*SORTED_CASES, "unsorted rows, padding"]


def forward_modes(name: str) -> tuple[int, ...]:
    """The rows_sorted modes case `name` runs the forward in: 1 (sorted) only where its rows are sorted."""
    return (0, -1) if name == "unsorted rows, padding" else (1, 0, -1)


def _several_blocks() -> tuple[np.ndarray, np.ndarray, int, int]:
    # 700 entries: three blocks of 256 threads, bad entries in the second and third (atomicMin across blocks).
    rng = np.random.default_rng(3)
    rows = np.sort(rng.integers(0, 50, 700)).astype(np.int32)
    cols = rng.integers(0, 90, 700).astype(np.int64)
    cols[[650, 300, 301]] = [90, -1, 1000]
    rows[[699, 520]] = [51, -3]
    return rows, cols, 50, 90


CHECK_CASES = [
    "no bad entries", "bad id, negative row, row past padding", "one entry, bad id", "no entries",
    "bad entries over several blocks",
]
_CHECKS = {
    "no bad entries": ([0, 0, 1, 2, 3], [1, 4, 2, 0, 4], 3, 5),
    "bad id, negative row, row past padding": ([0, 0, 1, -1, 2, 9, 3, 3], [1, 4, 2, 3, 0, 1, 2, 7], 3, 5),
    "one entry, bad id": ([0], [5], 1, 5),
    "no entries": ([], [], 2, 5),
}


def check_case(name: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(rows int32, ids int64, sample_count, vocab) of entry-check case `name`.

    Raises:
      KeyError: an unknown case.
    """
    if name == "bad entries over several blocks":
        return _several_blocks()
    rows, cols, samples, vocab = _CHECKS[name]
    return np.array(rows, np.int32), np.array(cols, np.int64), samples, vocab
