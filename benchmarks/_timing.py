"""Timing helpers shared by the benchmarks: alternate the contenders, report medians and spreads.

On a shared machine a lone absolute time means little; what counts is the
ratio between contenders measured in the same process, interleaved so that
a burst of load hits all of them alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Timing", "alternate", "ratio", "noisy", "markdown_table"]


@dataclass(frozen=True)
class Timing:
    """Seconds per repetition of one contender: median and min-max spread."""

    median_s: float
    min_s: float
    max_s: float
    reps: int

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3

    def as_dict(self) -> dict:
        return {
            "median_ms": self.median_s * 1e3,
            "min_ms": self.min_s * 1e3,
            "max_ms": self.max_s * 1e3,
            "reps": self.reps,
        }


def alternate(
    contenders: Mapping[str, Callable[[], object]], *, reps: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Runs every contender `warmup` times, then `reps` rounds, each round calling each contender once.

    The order within a round rotates so that no contender always runs first.
    Each call must block until its work is done (return a host value, or
    call `.numpy()`).
    """
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            contenders[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: _summary(values) for name, values in samples.items()}


def ratio(ours: Timing, peer: Timing) -> float:
    """ours / peer of the medians: below 1 means ours is faster."""
    return ours.median_s / peer.median_s


def noisy(a: Timing, b: Timing) -> bool:
    """True when either spread is wider than the difference of the medians (the ratio is not trustworthy)."""
    difference = abs(a.median_s - b.median_s)
    return max(a.max_s - a.min_s, b.max_s - b.min_s) > difference


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of `rows` (dicts) restricted to `columns`; floats get 3 significant digits."""

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _summary(values: list[float]) -> Timing:
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return Timing(median, ordered[0], ordered[-1], len(ordered))
