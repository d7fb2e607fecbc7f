"""Held-out metrics of every task, each beside the baseline a model must beat.

Every held-out row counts exactly once whatever the batch size: the last
partial batch is evaluated, and a held-out set smaller than one batch is one
partial batch. No metric depends on how rows fall into batches:

- ctr: `eval_loss` (log loss) and `eval_auc`; baseline `eval_baseline_loss`,
  always predicting the training click rate `base_rate`, and `eval_baseline_auc` 0.5.
- regression, rating: `eval_loss` (mean squared error), `eval_rmse`, `eval_mae`;
  baseline `eval_baseline_rmse`, `eval_baseline_mae`, always predicting the
  training mean `label_mean`.
- next_item: `eval_loss`, `eval_hit_rate_at_10`; baseline
  `eval_baseline_hit_rate_at_10`, always the 10 most frequent training targets.

next_item ranks each held-out target against the whole item catalogue:
every id of the item's id space (`eval_catalogue_size`: its hash buckets or
vocabulary size), not the other rows of a batch. `eval_loss` is the softmax
cross-entropy over that catalogue, and a hit at 10 means fewer than 10
catalogue items score strictly above the true target.
"""

from __future__ import annotations

import math

import numpy as np

from sparse_io.stats_file import Stats

__all__ = ["training_baseline", "evaluate", "summary_line", "label_stats", "HIT_AT"]

HIT_AT = 10
# Catalogue scores held at once while ranking next items: rows x items.
_SCORES_PER_CHUNK = 1 << 22


def label_stats(directory: str, label: str) -> dict | None:
    """The stats.json entry of column `label` of an ingest output (its "label" or "dense" entry); None if absent."""
    stats = Stats.load_if_present(directory)
    return stats.numeric(label) if stats is not None else None


def training_baseline(task, directory: str, *, verify: str = "sizes") -> dict:
    """What the baseline predictor learns from the training rows of `directory`.

    ctr: `base_rate` (the share of 1 labels, from stats.json's exact value counts). regression and rating:
    `label_mean` (stats.json's exact mean, or one pass over the label column when stats.json has none) and
    `label_scale` (the labels' spread, which a regression model's output is scaled by). next_item:
    `popular_items`, the `HIT_AT` most frequent target ids (ties to the lower id) over every training row.
    """
    if task.name == "next_item":
        return {"popular_items": _popular_targets(task, directory, verify)}
    stats = label_stats(directory, task.label) or {}
    if task.name == "ctr":
        counts = {float(v): c for v, c in stats.get("value_counts") or []}
        total = counts.get(0.0, 0) + counts.get(1.0, 0)
        return {"base_rate": counts.get(1.0, 0) / total} if total else {}
    if "mean" not in stats:  # a history ingest's target rating has no stats.json entry: count it here
        return _label_moments(task, directory, verify)
    return {"label_mean": float(stats["mean"]), "label_scale": _spread(stats)}


def _labels(task, directory: str, verify: str):
    """Every training row's label (float64 numpy arrays, one per 65,536 rows), read in shard order."""
    from transforms.tfdata.dataset import make_dataset

    features = [task.item] if task.item else task.features[:1]
    dataset = make_dataset(directory, 65536, shuffle=False, output="coo", features=features,
                           label=task.label, verify=verify)
    for _, label in dataset:
        yield label.numpy().astype(np.float64)


def _label_moments(task, directory: str, verify: str) -> dict:
    total = squares = 0.0
    rows = 0
    for y in _labels(task, directory, verify):
        y = y[~np.isnan(y)]
        total, squares, rows = total + float(y.sum()), squares + float(np.square(y).sum()), rows + y.size
    if not rows:
        return {}
    mean = total / rows
    spread = math.sqrt(max(squares / rows - mean * mean, 0.0))
    return {"label_mean": mean, "label_scale": spread if spread > 0 else max(abs(mean), 1.0)}


def _spread(stats: dict) -> float:
    """The standard deviation of stats.json's histogram of a column (bin centres), or 1 when it has none."""
    histogram = stats.get("histogram") or {}
    edges, counts = np.asarray(histogram.get("edges", []), float), np.asarray(histogram.get("counts", []), float)
    if counts.size == 0 or counts.sum() == 0 or edges.size != counts.size + 1:
        return 1.0
    centres = (edges[:-1] + edges[1:]) / 2
    mean = np.average(centres, weights=counts)
    spread = float(np.sqrt(np.average((centres - mean) ** 2, weights=counts)))
    return spread if spread > 0 else max(abs(float(stats.get("mean", 1.0))), 1.0)


def _popular_targets(task, directory: str, verify: str) -> list[int]:
    counts: dict[int, int] = {}
    for label in _labels(task, directory, verify):
        ids, n = np.unique(label.astype(np.int64), return_counts=True)
        for i, c in zip(ids.tolist(), n.tolist()):
            counts[i] = counts.get(i, 0) + c
    return [i for i, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:HIT_AT]]


def evaluate(model, task, dataset, baseline: dict) -> dict:
    """The task's held-out metrics and baselines (module table) over every `(features, label)` batch."""
    if task.name == "ctr":
        return _evaluate_ctr(model, task, dataset, baseline)
    if task.name == "next_item":
        return _evaluate_next_item(model, task, dataset, baseline)
    return _evaluate_regression(model, task, dataset, baseline)


def _evaluate_ctr(model, task, dataset, baseline: dict) -> dict:
    import keras
    import tensorflow as tf

    auc = keras.metrics.AUC(num_thresholds=2000)
    loss, rows, positives = 0.0, 0, 0
    for features, label in dataset:
        output = model(task.model_inputs(features, label), training=False)
        loss += float(tf.reduce_sum(task.per_row_loss(label, output)))
        y = tf.cast(label, tf.float32)
        auc.update_state(y, tf.sigmoid(output))
        rows += int(tf.shape(label)[0])
        positives += int(tf.reduce_sum(y))
    result = {"eval_rows": rows, "eval_loss": loss / rows if rows else math.nan, "eval_auc": float(auc.result())}
    rate = baseline.get("base_rate")
    if rows and rate is not None and 0 < rate < 1:
        result["eval_baseline_loss"] = -(positives * math.log(rate) + (rows - positives) * math.log(1 - rate)) / rows
        result["eval_baseline_auc"] = 0.5
    return result


def _evaluate_regression(model, task, dataset, baseline: dict) -> dict:
    import tensorflow as tf

    mean = baseline.get("label_mean")
    squares = absolutes = base_squares = base_absolutes = 0.0
    rows = 0
    for features, label in dataset:
        output = model(task.model_inputs(features, label), training=False).numpy().astype(np.float64)
        y = tf.cast(label, tf.float64).numpy()
        squares += float(np.sum((output - y) ** 2))
        absolutes += float(np.sum(np.abs(output - y)))
        if mean is not None:
            base_squares += float(np.sum((mean - y) ** 2))
            base_absolutes += float(np.sum(np.abs(mean - y)))
        rows += y.size
    if not rows:
        return {"eval_rows": 0, "eval_loss": math.nan}
    result = {"eval_rows": rows, "eval_loss": squares / rows, "eval_rmse": math.sqrt(squares / rows),
              "eval_mae": absolutes / rows}
    if mean is not None:
        result["eval_baseline_rmse"] = math.sqrt(base_squares / rows)
        result["eval_baseline_mae"] = base_absolutes / rows
    return result


def _evaluate_next_item(model, task, dataset, baseline: dict) -> dict:
    import tensorflow as tf

    items = model.items.embeddings  # [V, d]
    bias = tf.squeeze(model.item_bias.embeddings, 1)  # [V]
    catalogue = int(items.shape[0])
    popular = tf.constant(baseline.get("popular_items", []), tf.int64)
    loss, hits, popular_hits, rows = 0.0, 0, 0, 0
    for features, label in dataset:
        target = tf.cast(label, tf.int64)
        user = model.user_vector(features, tf.shape(target, out_type=tf.int32)[0])  # [B, d]
        own = tf.reduce_sum(user * tf.gather(items, target), axis=1) + tf.gather(bias, target)  # [B]
        above = tf.zeros_like(target)
        log_total = tf.fill(tf.shape(own), -np.inf)
        chunk = max(1, _SCORES_PER_CHUNK // max(int(target.shape[0] or 1), 1))
        for start in range(0, catalogue, chunk):
            scores = tf.matmul(user, items[start:start + chunk], transpose_b=True) + bias[start:start + chunk]
            above += tf.reduce_sum(tf.cast(scores > own[:, None], tf.int64), axis=1)
            log_total = tf.reduce_logsumexp(tf.stack([log_total, tf.reduce_logsumexp(scores, axis=1)]), axis=0)
        loss += float(tf.reduce_sum(log_total - own))
        hits += int(tf.reduce_sum(tf.cast(above < HIT_AT, tf.int32)))
        popular_hits += int(tf.reduce_sum(tf.cast(tf.reduce_any(target[:, None] == popular[None, :], axis=1),
                                                  tf.int32)))
        rows += int(target.shape[0] if target.shape[0] is not None else tf.shape(target)[0])
    if not rows:
        return {"eval_rows": 0, "eval_loss": math.nan}
    key = f"eval_hit_rate_at_{HIT_AT}"
    result = {"eval_rows": rows, "eval_loss": loss / rows, key: hits / rows, "eval_catalogue_size": catalogue}
    if baseline.get("popular_items"):
        result[f"eval_baseline_hit_rate_at_{HIT_AT}"] = popular_hits / rows
    return result


def summary_line(task_name: str, result: dict) -> str | None:
    """One line setting the held-out metrics beside their baseline; None without held-out metrics."""
    rows = result.get("eval_rows")
    if not rows:
        return None
    head = f"held-out ({rows:,} rows):"
    if task_name == "ctr":
        line = f"{head} log loss {result['eval_loss']:.4f}, AUC {result['eval_auc']:.4f}"
        if "eval_baseline_loss" in result:
            line += (f"; always predicting the training base rate {result['base_rate']:.4f}: log loss "
                     f"{result['eval_baseline_loss']:.4f}, AUC 0.5")
        return line
    if task_name in ("regression", "rating"):
        line = f"{head} RMSE {result['eval_rmse']:.4f}, MAE {result['eval_mae']:.4f}"
        if "eval_baseline_rmse" in result:
            line += (f"; always predicting the mean {result['label_mean']:.4f} of the training labels: RMSE "
                     f"{result['eval_baseline_rmse']:.4f}, MAE {result['eval_baseline_mae']:.4f}")
        return line
    key = f"eval_hit_rate_at_{HIT_AT}"
    line = (f"{head} hit@{HIT_AT} {result[key]:.4f} against the whole catalogue of "
            f"{result['eval_catalogue_size']:,} items, loss {result['eval_loss']:.4f}")
    if f"eval_baseline_hit_rate_at_{HIT_AT}" in result:
        line += (f"; always the {HIT_AT} most frequent training targets: hit@{HIT_AT} "
                 f"{result[f'eval_baseline_hit_rate_at_{HIT_AT}']:.4f}")
    return line
