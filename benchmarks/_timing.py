"""Small timing helpers for the benchmarks: interleave contenders, keep medians and spreads.

A lone absolute time on a shared machine says little. Contenders are run in
the same process, round-robin with a rotating order, so that a burst of
load from elsewhere lands on all of them; results are medians with their
min-max spread, compared as ratios.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Timing", "Paired", "alternate", "markdown_table", "noisy", "paired", "ratio"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one contender over `reps` calls."""

    median_s: float
    min_s: float
    max_s: float
    reps: int
    # One time per round of `alternate`, in round order: sample i of two contenders came from the same round.
    samples: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @property
    def spread_s(self) -> float:
        return self.max_s - self.min_s

    def as_dict(self) -> dict:
        return {
            "median_ms": self.median_s * 1e3,
            "min_ms": self.min_s * 1e3,
            "max_ms": self.max_s * 1e3,
            "reps": self.reps,
        }


def alternate(
    contenders: Mapping[str, Callable[[], object]],
    *,
    reps: int = 5,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    before: Callable[[], object] | None = None,
) -> dict[str, Timing]:
    """Times each contender `reps` times after `warmup` untimed rounds.

    Every round calls each contender once, starting one further along the
    list each round. A contender must not return before its work is done
    (fetch a host value, e.g. with `.numpy()`). `clock` may be
    `time.process_time` to count the CPU seconds of all the process's
    threads: the work done, which other processes' load barely changes.
    `before` is called, untimed, right before each timed call: e.g. a copy
    larger than the caches, so that every contender starts cold and
    whatever the previous one left running (torch's OpenMP threads keep
    spinning on the cores for a while after their work) lands on it rather
    than on the clock. A pause would not do: after sleeping, every
    contender's next call here runs slower.
    """
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(reps):
        start = round_index % len(names)
        for name in names[start:] + names[:start]:
            if before is not None:
                before()
            began = clock()
            contenders[name]()
            seconds[name].append(clock() - began)
    return {
        name: Timing(statistics.median(values), min(values), max(values), len(values), tuple(values))
        for name, values in seconds.items()
    }


def ratio(ours: Timing, peer: Timing) -> float:
    """Median over median; below 1 means `ours` takes less time."""
    return ours.median_s / peer.median_s


def noisy(a: Timing, b: Timing) -> bool:
    """Whether either spread is wider than the gap between the medians (then the ratio is not settled)."""
    return max(a.spread_s, b.spread_s) > abs(a.median_s - b.median_s)


@dataclass(frozen=True)
class Paired:
    """`a` against `b` round by round: the median of the per-round ratios a/b and a sign test.

    Two contenders timed in the same round of `alternate` ran seconds apart,
    so a load burst from elsewhere hits both; the per-round ratio cancels it,
    where medians of the two whole series do not. `p_value` is the one-sided
    sign-test probability of `a` being faster in at least `wins` of `rounds`
    rounds if neither were faster: below 0.01, `a` is measurably cheaper.
    """

    median_ratio: float
    wins: int
    rounds: int
    p_value: float


def paired(a: Timing, b: Timing) -> Paired:
    """Per-round comparison of two contenders timed together by `alternate`.

    Raises:
      ValueError: either has no per-round samples, or their rounds differ in number.
    """
    if not a.samples or len(a.samples) != len(b.samples):
        raise ValueError(f"paired() needs per-round samples of equal count, got {len(a.samples)} and {len(b.samples)}")
    ratios = [x / y for x, y in zip(a.samples, b.samples)]
    rounds = len(ratios)
    wins = sum(x < y for x, y in zip(a.samples, b.samples))
    p_value = sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds
    return Paired(statistics.median(ratios), wins, rounds, p_value)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """`rows` as a markdown table with the given columns; floats shown to 3 significant digits."""

    def cell(value: object) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column, "")) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def busy(seconds: float) -> Callable[[], None]:
    """A call that copies memory for `seconds`: keeps a core busy while other threads' spinning dies down.

    torch's OpenMP threads spin on the cores for a while after their work; placed right after a torch
    contender in `alternate` (which keeps the contenders' cyclic order), it takes that spinning instead of
    the next contender.
    """
    import numpy as np

    source = np.ones(1 << 20)
    target = np.empty_like(source)

    def call() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            np.copyto(target, source)

    return call
