"""Block layouts for `BlockSparseMatMul`: boolean `[K / bs, N / bs]` numpy arrays.

`layout[r, c]` is True when the block mapping inputs `r*bs:(r+1)*bs` to
outputs `c*bs:(c+1)*bs` exists. Layouts are plain numpy: they are fixed for
the life of a plan and never enter the graph.
"""

from __future__ import annotations

import numpy as np

__all__ = ["random_layout", "banded_layout", "magnitude_layout", "check_layout"]


def random_layout(
    k_blocks: int, n_blocks: int, density: float, *, seed: int | None = 0, every_column: bool = False
) -> np.ndarray:
    """`round(density * k_blocks * n_blocks)` blocks, chosen uniformly with `seed`.

    With `every_column`, each block column first gets one block (in a random
    row), so the count is `max(n_blocks, round(density * k_blocks * n_blocks))`:
    a layer whose output block has no input block would emit a constant there.

    Example:
      >>> int(random_layout(4, 4, 0.25, seed=1).sum())
      4
      >>> random_layout(2, 4, 0.1, seed=1, every_column=True).sum(axis=0).tolist()
      [1, 1, 1, 1]
    """
    _check_grid(k_blocks, n_blocks, "random_layout")
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"random_layout: density must be in [0, 1], got {density}")
    rng = np.random.default_rng(seed)
    total = k_blocks * n_blocks
    layout = np.zeros(total, dtype=bool)
    wanted = round(density * total)
    if every_column:
        layout[rng.integers(k_blocks, size=n_blocks) * n_blocks + np.arange(n_blocks)] = True
        wanted -= n_blocks
    if wanted > 0:
        free = np.flatnonzero(~layout)
        layout[rng.choice(free, size=wanted, replace=False)] = True
    return layout.reshape(k_blocks, n_blocks)


def banded_layout(k_blocks: int, n_blocks: int, bandwidth: int = 0) -> np.ndarray:
    """Blocks within `bandwidth` blocks of the diagonal; `bandwidth=0` is the block diagonal.

    For a non-square grid the diagonal runs from corner to corner: block row r
    is centred on column `(r + 0.5) * n_blocks / k_blocks`, and every block
    whose centre lies within `(bandwidth + 0.5) * max(1, n_blocks / k_blocks)`
    columns of it is kept, so each row and each column has at least one block.

    Example:
      >>> banded_layout(3, 3, 1).astype(int)
      array([[1, 1, 0],
             [1, 1, 1],
             [0, 1, 1]])
    """
    _check_grid(k_blocks, n_blocks, "banded_layout")
    if bandwidth < 0:
        raise ValueError(f"banded_layout: bandwidth must be >= 0, got {bandwidth}")
    row_centre = (np.arange(k_blocks)[:, None] + 0.5) * n_blocks / k_blocks  # in column units
    col_centre = np.arange(n_blocks)[None, :] + 0.5
    # A row of a wide grid spans n/k columns: widen the band so that consecutive rows meet.
    reach = (bandwidth + 0.5) * max(1.0, n_blocks / k_blocks)
    return np.abs(col_centre - row_centre) <= reach + 1e-9  # centres on the boundary count as inside


def magnitude_layout(dense: np.ndarray, block_size: int, keep: float) -> np.ndarray:
    """Keeps the `round(keep * blocks)` blocks of `dense` `[K, N]` with the largest Frobenius norm.

    Ties are broken towards the lower row-major block index.

    Example:
      >>> w = np.zeros((4, 4)); w[2:, :2] = 1.0
      >>> magnitude_layout(w, 2, 0.25).astype(int)
      array([[0, 0],
             [1, 0]])
    """
    dense = np.asarray(dense)
    if dense.ndim != 2:
        raise ValueError(f"magnitude_layout: dense must be 2-D [K, N], got shape {dense.shape}")
    if block_size < 1 or dense.shape[0] % block_size or dense.shape[1] % block_size:
        raise ValueError(
            f"magnitude_layout: shape {dense.shape} is not a multiple of block_size {block_size}"
        )
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"magnitude_layout: keep must be in [0, 1], got {keep}")
    k_blocks, n_blocks = dense.shape[0] // block_size, dense.shape[1] // block_size
    blocks = dense.reshape(k_blocks, block_size, n_blocks, block_size).astype(np.float64)
    norms = np.sqrt((blocks**2).sum(axis=(1, 3))).ravel()
    count = round(keep * norms.size)
    order = np.argsort(-norms, kind="stable")
    layout = np.zeros(norms.size, dtype=bool)
    layout[order[:count]] = True
    return layout.reshape(k_blocks, n_blocks)


def check_layout(layout, where: str) -> np.ndarray:
    """Returns `layout` as a 2-D bool array, or raises ValueError naming the problem."""
    array = np.asarray(layout)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(
            f"{where}: layout must be a non-empty 2-D array [K/bs, N/bs], got shape {array.shape}"
        )
    if array.dtype != bool:
        if not np.issubdtype(array.dtype, np.number) or not np.isin(array, (0, 1)).all():
            raise ValueError(f"{where}: layout must be boolean (or 0/1), got dtype {array.dtype}")
        array = array.astype(bool)
    return array


def _check_grid(k_blocks: int, n_blocks: int, where: str) -> None:
    if k_blocks < 1 or n_blocks < 1:
        raise ValueError(f"{where}: block grid must be at least 1x1, got {k_blocks}x{n_blocks}")
