"""Seeded synthetic click logs in the Criteo layout, with a label the features explain.

`synthetic_rating_events` makes the other kind of log: user/item rating
events whose ratings follow hidden user tastes and item traits, so a model
of a user's history predicts the next rating better than the mean does.

Each categorical column draws ids from a Zipf law (a few ids in most rows, a
long tail seen once), rendered as 8-digit hex as Criteo ships them; integer
columns are log-normal counts with some -1s; about 10-20% of cells are empty,
and some lines lose their trailing empty fields as real dumps do. The click
probability is a logistic function of per-id effects of C1..C3 and of I1, so
a model that learns from the ids beats chance on held-out rows.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

__all__ = ["synthetic_criteo_lines", "write_synthetic_criteo", "synthetic_rating_events", "write_synthetic_events"]

NUM_INT = 13
NUM_CAT = 26
_EFFECT_COLUMNS = 3


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _hex_ids(ids: np.ndarray, column: np.ndarray) -> np.ndarray:
    """8-digit lower-case hex strings of a 32-bit mix of (id, column), vectorised."""
    mixed = (ids.astype(np.uint64) + column.astype(np.uint64) * np.uint64(1 << 20)) * np.uint64(0x9E3779B1)
    mixed &= np.uint64(0xFFFFFFFF)
    shifts = np.arange(28, -1, -4, dtype=np.uint64)
    nibbles = (mixed[..., None] >> shifts) & np.uint64(0xF)
    digits = np.ascontiguousarray(_HEX_DIGITS[nibbles.astype(np.intp)])
    return digits.view("S8")[..., 0].astype(str)


def synthetic_criteo_lines(rows: int, seed: int, *, zipf_a: float = 1.3, max_id: int = 50_000) -> list[str]:
    """`rows` TSV lines (no newline): label, I1..I13, C1..C26.

    The same `seed` gives the same lines; the per-id effects that drive the
    label depend only on `seed // 1000`, so logs made with seeds 1000 and 1001
    share one click model (a training and a held-out day).
    """
    rng = np.random.default_rng(seed)
    world = np.random.default_rng(seed // 1000 + 12345)
    effects = world.normal(0.0, 1.2, size=(_EFFECT_COLUMNS, max_id + 1))

    ids = np.minimum(rng.zipf(zipf_a, size=(rows, NUM_CAT)), max_id)
    counts = np.floor(rng.lognormal(1.0, 1.3, size=(rows, NUM_INT))).astype(np.int64)
    counts[rng.random((rows, NUM_INT)) < 0.01] = -1
    missing_int = rng.random((rows, NUM_INT)) < 0.15
    missing_cat = rng.random((rows, NUM_CAT)) < 0.1

    logit = -1.3 + 0.25 * np.log1p(np.maximum(counts[:, 0], 0)) * ~missing_int[:, 0]
    for c in range(_EFFECT_COLUMNS):
        logit += np.where(missing_cat[:, c], 0.0, effects[c, ids[:, c]])
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)

    ints = np.where(missing_int, "", counts.astype(str))
    cats = np.where(missing_cat, "", _hex_ids(ids, np.arange(NUM_CAT)[None, :]))
    table = np.concatenate([labels.astype(str)[:, None], ints, cats], axis=1)
    lines = ["\t".join(row) for row in table.tolist()]
    # Real dumps drop trailing empty fields on some lines; readers pad them back.
    for r in range(0, rows, 3):
        lines[r] = lines[r].rstrip("\t")
    return lines


def write_synthetic_criteo(path: str, rows: int, seed: int, **kwargs) -> str:
    """Writes `synthetic_criteo_lines(rows, seed)` to `path` (gzip when it ends in .gz)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = "\n".join(synthetic_criteo_lines(rows, seed, **kwargs)) + ("\n" if rows else "")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def synthetic_rating_events(events: int, seed: int, *, users: int = 300, items: int = 2000,
                            zipf_a: float = 1.2, rank: int = 4) -> list[dict]:
    """`events` rating events `{"user_id", "item_id", "timestamp", "rating"}`, time-ordered.

    Each event picks, among 8 items drawn from a Zipf law, the one that best
    fits the user's taste (with Gumbel noise), so a history says what comes
    next; its rating is `3 + quality(item) + 1.2 * taste(user) . trait(item)`
    plus noise, rounded and clipped to 1..5. Tastes, traits and qualities
    depend only on `seed // 1000` (as for `synthetic_criteo_lines`).
    """
    rng = np.random.default_rng(seed)
    world = np.random.default_rng(seed // 1000 + 54321)
    taste = world.normal(0.0, 1.0, size=(users, rank)) / np.sqrt(rank)
    trait = world.normal(0.0, 1.0, size=(items, rank))
    quality = world.normal(0.0, 0.8, size=items)
    user = rng.integers(users, size=events)
    candidates = np.minimum(rng.zipf(zipf_a, size=(events, 8)), items) - 1
    fit = np.einsum("ek,eck->ec", taste[user], trait[candidates]) + rng.gumbel(size=candidates.shape)
    item = candidates[np.arange(events), np.argmax(fit, axis=1)]
    score = 3.0 + quality[item] + 1.2 * np.einsum("ij,ij->i", taste[user], trait[item])
    rating = np.clip(np.rint(score + rng.normal(0.0, 0.3, size=events)), 1, 5)
    start = 1_700_000_000 + 86_400 * (seed % 1000)
    time = start + np.sort(rng.integers(0, 86_400, size=events))
    return [
        {"user_id": f"u{u}", "item_id": int(i), "timestamp": int(t), "rating": float(r)}
        for u, i, t, r in zip(user.tolist(), item.tolist(), time.tolist(), rating.tolist())
    ]


def write_synthetic_events(path: str, events: int, seed: int, **kwargs) -> str:
    """Writes `synthetic_rating_events(events, seed)` as JSON Lines to `path`."""
    import json

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for event in synthetic_rating_events(events, seed, **kwargs):
            f.write(json.dumps(event) + "\n")
    return path
