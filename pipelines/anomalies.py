"""Anomalies in an ingest's stats.json, alone or against a baseline ingest's (drift and skew, as TFDV finds them).

Everything is computed from the two stats.json documents, so a comparison
costs nothing however large the data. Each anomaly is one `Anomaly(feature,
kind, value, threshold, detail)`; it is raised when `value > threshold`.

Against a baseline (default thresholds in `DEFAULT_THRESHOLDS`):

  categorical_drift  L-infinity distance between the shares of a sparse feature's raw values
                     (stats.json `raw_values.top`), as TFDV's. A value listed on one side only gets
                     share 0 on the other when that list is complete, otherwise the other list's
                     smallest share: the distance is never overstated.
  numeric_drift      Jensen-Shannon divergence (base 2, in [0, 1]) between a dense feature's histograms:
                     the current histogram is re-binned onto the baseline's edges (mass uniform within a
                     bin), with one bin below and one above the baseline's range.
  missing_rate       absolute change of the share of rows missing the feature.
  out_of_range       share of the current values outside the baseline's [min, max] (from the histogram).
  oov_share          rise of the share of ids that are out of vocabulary (`oov_ids` / ids).
  label_rate         absolute change of the label's mean (its positive rate for a 0/1 label).
  capacity_overflow  share of batches of the largest batch size whose ids overflow the baseline's
                     `p99_9` capacity (which the baseline's own batches overflow 0.1% of the time);
                     estimated with a normal approximation of the ids per batch fitted to the
                     current `capacity` entry.

In one ingest alone: `always_missing` (no row has the feature), `constant`
(one value in every row that has it), `label_constant` (a label rate of 0 or 1),
and `feature_missing` (the baseline has the feature, the ingest has not).
`dead_letters` is one anomaly per kind of dead letter (stats.json `dead_letters`,
grouped by `pipelines.dead_letter_counts.pattern`) whose share of the rows read
is above its threshold (default 0.001: one row in a thousand); its feature is
`(dead letters)` and its detail the count, the share and the reason as written.
The ingest's `error_budget` refuses a run with too many bad rows; this flags
one that stayed within it but lost rows to one problem.

Thresholds are set in a config's `validation:` key, for every feature or per feature::

  validation:
    thresholds: {categorical_drift: 0.2}    # every feature
    features:
      C3: {categorical_drift: 0.5, missing_rate: 0.3}
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

__all__ = ["Anomaly", "DEAD_LETTERS", "DEFAULT_THRESHOLDS", "Thresholds", "ThresholdError", "find_anomalies",
           "l_infinity", "jensen_shannon", "rebinned", "thresholds_from"]

DEFAULT_THRESHOLDS = {
    "categorical_drift": 0.1,   # TFDV's customary infinity_norm threshold
    "numeric_drift": 0.1,
    "missing_rate": 0.1,
    "out_of_range": 0.01,
    "oov_share": 0.05,
    "label_rate": 0.05,
    "capacity_overflow": 0.01,  # ten times the 0.1% a p99_9 capacity is built for
    "always_missing": 0.0,
    "constant": 0.0,
    "label_constant": 0.0,
    "feature_missing": 0.0,
    "dead_letters": 0.001,      # share of the rows read rejected for one kind of reason
}
DEAD_LETTERS = "(dead letters)"  # the feature an anomaly of the dead letters is reported under
_Z_999 = 3.090232306167813  # the standard normal's 99.9th percentile


class ThresholdError(ValueError):
    """A `validation:` value that is not a valid threshold setting (the message names the key)."""


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One finding: `value` exceeded `threshold` for `feature` (the label's name for label ones)."""

    feature: str
    kind: str
    value: float
    threshold: float
    detail: str

    def line(self) -> str:
        """`feature<TAB>kind<TAB>value<TAB>threshold<TAB>detail`, as `pipelines.validate` prints it."""
        return f"{self.feature}\t{self.kind}\t{self.value:.6g}\t{self.threshold:g}\t{self.detail}"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Thresholds per anomaly kind: `every` for all features, `per_feature` overriding them."""

    every: dict = dataclasses.field(default_factory=dict)
    per_feature: dict = dataclasses.field(default_factory=dict)

    def __call__(self, feature: str, kind: str) -> float:
        """The threshold of `kind` for `feature`: its own, else the one for every feature, else the default."""
        return self.per_feature.get(feature, {}).get(kind, self.every.get(kind, DEFAULT_THRESHOLDS[kind]))


def _kinds(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise ThresholdError(f"{where}: must be a mapping of anomaly kind to threshold, got {type(raw).__name__}")
    out = {}
    for kind, value in raw.items():
        if kind not in DEFAULT_THRESHOLDS:
            known = ", ".join(sorted(DEFAULT_THRESHOLDS))
            raise ThresholdError(f"{where}.{kind}: unknown anomaly kind (known: {known})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ThresholdError(f"{where}.{kind}: threshold must be a number >= 0, got {value!r}")
        out[kind] = float(value)
    return out


def thresholds_from(raw, where: str = "validation") -> Thresholds:
    """The `Thresholds` of a config's `validation:` value (None: the defaults).

    Raises:
      ThresholdError: an unknown key or kind, or a threshold that is not a number >= 0 (the key is named).

    Example:
      >>> t = thresholds_from({"thresholds": {"missing_rate": 0.2}, "features": {"C3": {"missing_rate": 0.5}}})
      >>> t("C3", "missing_rate"), t("C4", "missing_rate"), t("C4", "numeric_drift")
      (0.5, 0.2, 0.1)
    """
    if raw is None:
        return Thresholds()
    if not isinstance(raw, dict):
        raise ThresholdError(f"{where}: must be a mapping (thresholds:, features:), got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"thresholds", "features"})
    if unknown:
        raise ThresholdError(f"{where}.{unknown[0]}: unknown key (allowed: features, thresholds)")
    features = raw.get("features") or {}
    if not isinstance(features, dict):
        raise ThresholdError(f"{where}.features: must be a mapping of feature name to thresholds")
    return Thresholds(_kinds(raw.get("thresholds") or {}, f"{where}.thresholds"),
                      {str(f): _kinds(k, f"{where}.features.{f}") for f, k in features.items()})


def l_infinity(base: dict, current: dict) -> float:
    """L-infinity distance between two `raw_values` entries' value shares (see the module doc).

    Example:
      >>> a = {"distinct": 2, "exact": True, "top": [["x", 6, 0.6], ["y", 4, 0.4]]}
      >>> b = {"distinct": 2, "exact": True, "top": [["x", 3, 0.3], ["z", 7, 0.7]]}
      >>> round(l_infinity(a, b), 6)
      0.7
    """
    def shares(entry):
        top = entry.get("top", [])
        complete = entry.get("exact", True) and len(top) >= entry.get("distinct", 0)
        floor = 0.0 if complete or not top else min(s for _, _, s in top)
        return {v: s for v, _, s in top}, floor

    (p, p_floor), (q, q_floor) = shares(base), shares(current)
    distance = 0.0
    for value in set(p) | set(q):
        if value in p and value in q:
            gap = abs(p[value] - q[value])
        elif value in p:
            gap = max(0.0, p[value] - q_floor)
        else:
            gap = max(0.0, q[value] - p_floor)
        distance = max(distance, gap)
    return distance


def _cdf(edges: list, counts: list):
    """The function x -> how many of the histogram's values lie below x (mass spread uniformly within a bin)."""
    edges_a = np.asarray(edges, dtype=np.float64)
    cumulative = np.concatenate([[0.0], np.cumsum(np.asarray(counts, dtype=np.float64))])
    return lambda x: np.interp(np.asarray(x, dtype=np.float64), edges_a, cumulative, left=0.0, right=cumulative[-1])


def rebinned(edges: list, counts: list, onto: list) -> np.ndarray:
    """A histogram's counts over the bins of `onto`, plus one bin below and one above it (len(onto) + 1 bins)."""
    cdf = _cdf(edges, counts)
    at = cdf(onto)
    total = float(np.sum(counts))
    return np.concatenate([[at[0]], np.diff(at), [total - at[-1]]])


def jensen_shannon(p, q) -> float:
    """Jensen-Shannon divergence (base 2) of two count vectors over the same bins; 0 when either is empty.

    Example:
      >>> jensen_shannon([1, 0], [0, 1]), jensen_shannon([2, 2], [1, 1])
      (1.0, 0.0)
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.sum() <= 0 or q.sum() <= 0:
        return 0.0
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a):
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return min(1.0, max(0.0, 0.5 * kl(p) + 0.5 * kl(q)))


def _missing_share(entry: dict, sparse: bool) -> float:
    rows = entry.get("rows", 0)
    return (entry.get("empty_rows" if sparse else "missing", 0) / rows) if rows else 0.0


def _ids(entry: dict) -> float:
    return entry.get("ids_per_row", {}).get("mean", 0.0) * entry.get("rows", 0)


def _overflow_share(base: dict, current: dict) -> tuple[float, int] | None:
    """(share of current batches over the baseline's p99_9 capacity, batch size), at the largest common size."""
    # A batch size past either ingest's rows is one batch of everything: no overflow rate to speak of.
    rows = min(base.get("rows", 0), current.get("rows", 0))
    sizes = sorted((b for b in set(base.get("capacity", {})) & set(current.get("capacity", {})) if int(b) < rows),
                   key=int)
    if not sizes:
        return None
    b = sizes[-1]
    limit = base["capacity"][b]["p99_9"]
    mean = current.get("ids_per_row", {}).get("mean", 0.0) * int(b)
    sigma = (current["capacity"][b]["p99_9"] - mean) / _Z_999
    if sigma <= 0:
        return (1.0 if mean > limit else 0.0), int(b)
    return 0.5 * math.erfc((limit - mean) / (sigma * math.sqrt(2))), int(b)


def _single(stats: dict, t: Thresholds) -> list[Anomaly]:
    found = []
    for name, s in stats.get("features", {}).items():
        if s.get("rows", 0) and s.get("empty_rows", 0) == s["rows"]:
            found.append(Anomaly(name, "always_missing", 1.0, t(name, "always_missing"), "no row has an id"))
        elif s.get("rows", 0) and (s.get("raw_values") or {}).get("distinct", s.get("distinct_ids")) == 1:
            found.append(Anomaly(name, "constant", 1.0, t(name, "constant"), "one value in every row that has one"))
    for name, s in stats.get("dense", {}).items():
        if s.get("rows", 0) and s.get("missing", 0) == s["rows"]:
            found.append(Anomaly(name, "always_missing", 1.0, t(name, "always_missing"), "no row has a value"))
        elif "min" in s and s["min"] == s["max"]:
            found.append(Anomaly(name, "constant", 1.0, t(name, "constant"), f"every value is {s['min']:g}"))
    label = stats.get("label")
    if label and "mean" in label and (label.get("value_counts") is not None) and len(label["value_counts"]) == 1:
        found.append(Anomaly(label["name"], "label_constant", 1.0, t(label["name"], "label_constant"),
                             f"every label is {label['value_counts'][0][0]}"))
    found += _dead_letters(stats.get("dead_letters") or {}, t)
    return [a for a in found if a.value > a.threshold]


def _dead_letters(entry: dict, t: Thresholds) -> list[Anomaly]:
    """One candidate per kind of dead letter: its share of the rows read, against the `dead_letters` threshold."""
    found = []
    records = entry.get("records", 0)
    for group in entry.get("reasons", []):
        texts = group.get("texts") or [[group.get("pattern", ""), group["count"]]]
        text = " ".join(str(texts[0][0]).split())  # one line: a reason holds no tab or newline in the output
        others = len(texts) - 1 + group.get("more_texts", 0)
        more = f" (and {others:,} other text{'' if others == 1 else 's'} like it)" if others else ""
        found.append(Anomaly(DEAD_LETTERS, "dead_letters", float(group["share"]), t(DEAD_LETTERS, "dead_letters"),
                             f"{group['count']:,} of {records:,} rows read ({group['share']:.2%}): {text}{more}"))
    return found


def _against(stats: dict, base: dict, t: Thresholds) -> list[Anomaly]:
    found = []
    for name, b in base.get("features", {}).items():
        s = stats.get("features", {}).get(name)
        if s is None:
            found.append(Anomaly(name, "feature_missing", 1.0, t(name, "feature_missing"), "in the baseline only"))
            continue
        if b.get("raw_values") and s.get("raw_values"):
            found.append(Anomaly(name, "categorical_drift", l_infinity(b["raw_values"], s["raw_values"]),
                                 t(name, "categorical_drift"), "L-infinity distance of raw-value shares"))
        was, now = _missing_share(b, True), _missing_share(s, True)
        found.append(Anomaly(name, "missing_rate", abs(now - was), t(name, "missing_rate"),
                             f"missing in {now:.1%} of rows, baseline {was:.1%}"))
        if "oov_ids" in s:
            was = b.get("oov_ids", 0) / _ids(b) if _ids(b) else 0.0
            now = s["oov_ids"] / _ids(s) if _ids(s) else 0.0
            found.append(Anomaly(name, "oov_share", now - was, t(name, "oov_share"),
                                 f"{now:.1%} of ids out of vocabulary, baseline {was:.1%}"))
        overflow = _overflow_share(b, s)
        if overflow is not None:
            share, size = overflow
            found.append(Anomaly(name, "capacity_overflow", share, t(name, "capacity_overflow"),
                                 f"share of {size}-row batches over the baseline's p99_9 capacity"))
    for name, b in (base.get("dense") or {}).items():
        s = (stats.get("dense") or {}).get(name)
        if s is None:
            found.append(Anomaly(name, "feature_missing", 1.0, t(name, "feature_missing"), "in the baseline only"))
            continue
        found += _numeric(name, b, s, t)
    label, base_label = stats.get("label"), base.get("label")
    if label and base_label and "mean" in label and "mean" in base_label:
        name = label["name"]
        found.append(Anomaly(name, "label_rate", abs(label["mean"] - base_label["mean"]), t(name, "label_rate"),
                             f"label mean {label['mean']:.4g}, baseline {base_label['mean']:.4g}"))
    return [a for a in found if a.value > a.threshold]


def _numeric(name: str, b: dict, s: dict, t: Thresholds) -> list[Anomaly]:
    was, now = _missing_share(b, False), _missing_share(s, False)
    found = [Anomaly(name, "missing_rate", abs(now - was), t(name, "missing_rate"),
                     f"missing in {now:.1%} of rows, baseline {was:.1%}")]
    if "histogram" not in b or "histogram" not in s:
        return found
    hb, hs = b["histogram"], s["histogram"]
    base_counts = np.concatenate([[0.0], np.asarray(hb["counts"], dtype=np.float64), [0.0]])
    found.append(Anomaly(name, "numeric_drift", jensen_shannon(base_counts, rebinned(hs["edges"], hs["counts"],
                                                                                     hb["edges"])),
                         t(name, "numeric_drift"), "Jensen-Shannon divergence of the histograms"))
    cdf = _cdf(hs["edges"], hs["counts"])
    total = float(np.sum(hs["counts"]))
    outside = (float(cdf(b["min"])) + total - float(cdf(b["max"]))) / total if total else 0.0
    found.append(Anomaly(name, "out_of_range", outside, t(name, "out_of_range"),
                         f"share outside the baseline's range [{b['min']:g}, {b['max']:g}]; "
                         f"now [{s['min']:g}, {s['max']:g}]"))
    return found


def find_anomalies(stats: dict, baseline: dict | None = None, thresholds: Thresholds | None = None, *,
                   time_columns=()) -> list[Anomaly]:
    """The anomalies of one stats.json document, and against `baseline`'s when given, by feature then kind.

    `time_columns` (schema.json's `time_unit` columns) are not compared for drift or range: a later
    day's timestamps always lie past the baseline's.

    Example:
      >>> stats = {"features": {"C1": {"rows": 4, "empty_rows": 4}}}
      >>> [a.kind for a in find_anomalies(stats)]
      ['always_missing']
    """
    t = thresholds or Thresholds()
    found = _single(stats, t) + (_against(stats, baseline, t) if baseline is not None else [])
    found = [a for a in found if not (a.feature in time_columns and a.kind in ("numeric_drift", "out_of_range"))]
    return sorted(found, key=lambda a: (_natural(a.feature), a.kind))


def _natural(name: str) -> list:
    """C2 before C10 (pipelines.report_table.natural_key; not imported, as the report imports this module)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
