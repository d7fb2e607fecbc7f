"""`InputState`: where a worker is in its data, to save beside a model checkpoint.

The Parquet reader hands out, with each batch when asked, the position just
after it; passing that position back to `make_dataset(start=...)` in a new
process continues with exactly the rows not yet delivered.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

__all__ = ["InputState", "fingerprint"]

_MASK63 = (1 << 63) - 1


def fingerprint(*parts: object) -> int:
    """A stable (across processes and machines) 63-bit digest of `parts`' JSON."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & _MASK63


@dataclasses.dataclass(frozen=True)
class InputState:
    """A worker's position: `row` rows into the `shard`-th unit of epoch `epoch`.

    A unit is a row-group slice, taken in that epoch's (possibly shuffled)
    order; `(epoch, 0, 0)` is the start of an epoch. `fingerprint` identifies
    the reading plan (files, row groups, seed, shuffle, worker), so a state is
    never applied to a different plan by mistake.

    Example:
      >>> s = InputState(epoch=1, shard=3, row=17, fingerprint=42)
      >>> InputState.from_json(s.to_json()) == s
      True
      >>> InputState.from_tensor([1, 3, 17, 42]) == s
      True
    """

    epoch: int
    shard: int
    row: int
    fingerprint: int

    def __post_init__(self) -> None:
        for key in ("epoch", "shard", "row"):
            value = getattr(self, key)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"InputState: {key} must be a non-negative integer, got {value!r}")
            object.__setattr__(self, key, int(value))
        object.__setattr__(self, "fingerprint", int(self.fingerprint))

    def to_json(self) -> str:
        """The state as a JSON object with keys epoch, shard, row and fingerprint (sorted)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> InputState:
        """The state `to_json` wrote.

        Raises:
          ValueError: not JSON, keys other than exactly epoch, shard, row and
            fingerprint, or a negative or non-integer epoch, shard or row.
        """
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) != {"epoch", "shard", "row", "fingerprint"}:
            raise ValueError(f"InputState JSON must have keys epoch, shard, row, fingerprint; got {text!r}")
        return cls(**data)

    @classmethod
    def from_tensor(cls, position) -> InputState:
        """From the int64 `[4]` position a dataset made with `return_position=True` yields."""
        values = np.asarray(position).tolist()
        if len(values) != 4:
            raise ValueError(f"a position has 4 values (epoch, shard, row, fingerprint), got {values}")
        return cls(*values)
