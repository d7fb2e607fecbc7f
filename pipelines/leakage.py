"""Features that give the label away: the rating beside `liked = rating >= 4`, a copy of the click.

`label_leaks` reads up to `max_rows` training rows (in shard order) and
names every model feature that, on its own, determines the label:

- equal: a numeric feature equal to the label on every row where it is present;
- ctr: a held-out AUC of at least 0.999 from the feature alone. A numeric
  feature scores rows by its value (either direction); any feature also
  scores them by the mean label of its values (ids) on the even rows, AUC
  measured on the odd rows (ids unseen there score the even rows' rate;
  at least 100 rows).

Such a feature makes a held-out AUC of 1.0 mean nothing; `pipelines.train`
warns about each by name and `--exclude` drops it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["label_leaks", "auc", "LEAK_AUC"]

LEAK_AUC = 0.999
_MIN_ROWS = 100


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The ROC AUC of `scores` for 0/1 `labels` (ties count half); NaN when one class is absent.

    Example:
      >>> auc(np.array([0.1, 0.4, 0.4, 0.9]), np.array([0, 0, 1, 1]))
      0.875
    """
    labels = labels.astype(bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # Average rank (1-based) of each distinct score, so ties share their ranks.
    ends = np.cumsum(counts)
    mid_ranks = ends - (counts - 1) / 2.0
    rank_sum = float(mid_ranks[inverse][labels].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def label_leaks(directory: str, task, schema, *, max_rows: int = 50_000, verify: str = "sizes") -> list[dict]:
    """`[{"feature": name, "reason": text}, ...]` for each model feature of `task` that determines the label.

    Flat tasks only (ctr, regression); `task.features` are the columns checked (timestamps are not model
    inputs and are skipped).
    """
    from transforms.tfdata.dataset import make_dataset

    names = [n for n in task.features if not (schema[n].kind == "dense" and schema[n].time_unit)]
    if not names:
        return []
    dataset = make_dataset(directory, 4096, shuffle=False, output="ragged", features=names, label=task.label,
                           verify=verify)
    columns: dict[str, list] = {n: [] for n in names}
    labels, rows = [], 0
    for features, label in dataset:
        for n in names:
            value = features[n]
            columns[n].append(value.to_list() if hasattr(value, "to_list") else value.numpy())
        labels.append(label.numpy())
        rows += len(labels[-1])
        if rows >= max_rows:
            break
    if not rows:
        return []
    y = np.concatenate(labels)[:max_rows].astype(np.float64)
    leaks = []
    for n in names:
        if schema[n].is_sparse:
            values = [tuple(ids) for part in columns[n] for ids in part][:max_rows]
            reason = _determines(values, y, task.name)
        else:
            x = np.concatenate(columns[n])[:max_rows]
            reason = _numeric_determines(x, y, task.name)
        if reason:
            leaks.append({"feature": n, "reason": reason})
    return leaks


def _numeric_determines(x: np.ndarray, y: np.ndarray, task: str) -> str | None:
    if x.dtype.kind in "iu":
        present = x != np.iinfo(np.int64).min  # transforms.MISSING_INT
    else:
        present = ~np.isnan(x)
    x64 = x.astype(np.float64)
    if present.any() and np.array_equal(x64[present], y[present]):
        return f"equals the label on all {int(present.sum()):,} rows where it is present"
    if task == "ctr" and present.any():
        score = auc(x64[present], y[present])
        if np.isfinite(score) and max(score, 1 - score) >= LEAK_AUC:
            return f"alone scores AUC {max(score, 1 - score):.4f} on the training rows"
    return _determines([(v,) if p else () for v, p in zip(x64.tolist(), present.tolist())], y, task)


def _determines(values: list[tuple], y: np.ndarray, task: str) -> str | None:
    """A held-out AUC of the per-value mean label (fit on even rows, scored on odd ones) >= LEAK_AUC (ctr).

    Fewer than `_MIN_ROWS` rows say too little to call a feature a leak.
    """
    if task != "ctr" or len(values) < _MIN_ROWS:
        return None
    fit_sum: dict = {}
    fit_count: dict = {}
    for value, label in zip(values[0::2], y[0::2].tolist()):
        for v in value:
            fit_sum[v] = fit_sum.get(v, 0.0) + label
            fit_count[v] = fit_count.get(v, 0) + 1
    prior = float(np.mean(y[0::2]))
    scores = []
    for value in values[1::2]:
        seen = [fit_sum[v] / fit_count[v] for v in value if v in fit_count]
        scores.append(float(np.mean(seen)) if seen else prior)
    score = auc(np.array(scores), y[1::2])
    if np.isfinite(score) and score >= LEAK_AUC:
        return f"alone scores a held-out AUC of {score:.4f} (its values' click rate on half the training rows)"
    return None
