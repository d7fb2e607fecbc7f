"""pipelines.validate: drift and skew between two ingests, single-ingest anomalies, thresholds from a config."""

import copy
import json

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from pipelines.anomalies import ThresholdError, find_anomalies, jensen_shannon, l_infinity, rebinned, thresholds_from
from pipelines.config import ConfigError, load_config
from pipelines.ingest import run_ingest
from pipelines.validate import main
from tests.conftest import REPO_ROOT

OWN_LOGS = str(REPO_ROOT / "pipelines" / "configs" / "own_logs.yaml")
_DAY_MS = 86_400_000


def _log(path, seed, rows=3_000, drift=False, day=0):
    """A click log in own_logs.yaml's layout. `drift`: other popular items, dearer prices; the rest alike."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, 41) ** 1.5
    items = rng.choice(40, rows, p=weights / weights.sum())
    if drift:
        items = (items + 7) % 40  # the popular items change
    lines = ["clicked\tuser_id\titem_id\ttags\tprice\tevent_time"]
    for i in range(rows):
        value = rng.gamma(2.0, 10.0) * (2.5 if drift else 1.0) + (30 if drift else 0)
        price = "NA" if rng.random() < 0.1 else f"{value:.2f}"
        # Two tags a row: batches of any rows hold as many ids (a sample's ids per row would wobble).
        tags = "|".join(f"t{t}" for t in rng.choice(6, 2, replace=False))
        time = 1_709_251_200_000 + day * _DAY_MS + int(rng.integers(0, _DAY_MS))
        lines.append(f"{int(rng.random() < 0.3)}\tu{rng.integers(0, 50)}\ti{items[i]}\t{tags}\t{price}\t{time}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def ingests(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    out = {}
    for name, seed, drift, day in (("train", 1, False, 0), ("alike", 2, False, 1), ("drifted", 3, True, 1)):
        log = _log(root / f"{name}.tsv", seed, drift=drift, day=day)
        run_ingest(["--input", str(log), "--config", OWN_LOGS, "--output", str(root / name), "--no_report"])
        out[name] = root / name
    return out


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, argv)))
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_a_drifted_ingest_exits_3_naming_exactly_the_drifted_features(ingests, capsys):
    code, out, err = _run(capsys, ingests["drifted"], "--baseline", ingests["train"])
    assert code == 3, (out, err)
    lines = [line.split("\t") for line in out.splitlines()]
    assert {fields[0] for fields in lines} == {"item_id", "price"}
    kinds = {(fields[0], fields[1]) for fields in lines}
    assert ("item_id", "categorical_drift") in kinds and ("price", "numeric_drift") in kinds
    assert all(len(fields) == 5 and float(fields[2]) > float(fields[3]) for fields in lines)
    assert "anomal" in err and str(ingests["train"]) in err


def test_an_ingest_like_its_baseline_exits_0(ingests, capsys):
    code, out, err = _run(capsys, ingests["alike"], "--baseline", ingests["train"])
    assert code == 0, (out, err)
    assert "no anomalies" in out
    # The day after's timestamps all lie past the baseline's: not an anomaly of a time column.
    assert json.loads((ingests["alike"] / "stats.json").read_text())["dense"]["event_time"]["min"] > \
        json.loads((ingests["train"] / "stats.json").read_text())["dense"]["event_time"]["max"]


def test_distances_match_numpy_and_scipy_computations(ingests):
    train = json.loads((ingests["train"] / "stats.json").read_text())
    drifted = json.loads((ingests["drifted"] / "stats.json").read_text())
    # L-infinity over the item shares, both lists complete (40 items, exact counts).
    a, b = train["features"]["item_id"]["raw_values"], drifted["features"]["item_id"]["raw_values"]
    assert a["exact"] and len(a["top"]) == a["distinct"] == 40
    values = sorted({v for v, _, _ in a["top"]} | {v for v, _, _ in b["top"]})
    p = np.array([dict((v, c) for v, c, _ in a["top"]).get(v, 0) for v in values], dtype=float)
    q = np.array([dict((v, c) for v, c, _ in b["top"]).get(v, 0) for v in values], dtype=float)
    assert l_infinity(a, b) == pytest.approx(np.max(np.abs(p / p.sum() - q / q.sum())))
    # Jensen-Shannon on common bins: scipy's distance is the square root of the base-2 divergence.
    x, y = np.array([5, 0, 3, 2, 0, 9.0]), np.array([1, 4, 3, 0, 0, 1.0])
    assert jensen_shannon(x, y) == pytest.approx(jensenshannon(x, y, base=2) ** 2)
    pn, qn = x / x.sum(), y / y.sum()
    m = (pn + qn) / 2
    by_hand = 0.5 * sum(pi * np.log2(pi / mi) for pi, mi in zip(pn, m) if pi) + \
        0.5 * sum(qi * np.log2(qi / mi) for qi, mi in zip(qn, m) if qi)
    assert jensen_shannon(x, y) == pytest.approx(by_hand)
    # The reported price drift is the divergence of the baseline histogram and the re-binned current one.
    hb, hd = train["dense"]["price"]["histogram"], drifted["dense"]["price"]["histogram"]
    found = {(x.feature, x.kind): x.value for x in find_anomalies(drifted, train)}
    moved = rebinned(hd["edges"], hd["counts"], hb["edges"])
    base = np.concatenate([[0], hb["counts"], [0]])
    assert found[("price", "numeric_drift")] == pytest.approx(jensenshannon(base, moved, base=2) ** 2)


def test_rebinning_spreads_a_bin_uniformly():
    # 10 values uniform over [0, 10) onto bins [2, 4), [4, 12): 2 below, 2, 6, none above.
    assert rebinned([0, 10], [10], [2, 4, 12]).tolist() == pytest.approx([2, 2, 6, 0])
    assert rebinned([0, 5, 10], [4, 6], [-1, 5, 7.5]).tolist() == pytest.approx([0, 4, 3, 3])


def test_l_infinity_does_not_overstate_a_value_cut_from_a_truncated_list():
    base = {"distinct": 100, "exact": True, "top": [["a", 50, 0.5], ["b", 10, 0.1]]}  # 98 values not listed
    current = {"distinct": 2, "exact": True, "top": [["a", 50, 0.5], ["c", 50, 0.5]]}
    # c may hold up to b's 10% in the baseline: at least 0.4 apart; b is 0 now: 0.1.
    assert l_infinity(base, current) == pytest.approx(0.4)


def _stats_with(**changes):
    base = {
        "num_rows": 1000,
        "features": {"f": {"rows": 1000, "empty_rows": 100, "ids_per_row": {"mean": 0.9},
                           "distinct_ids": 5, "oov_ids": 9,
                           "capacity": {"100": {"max": 100, "p99_9": 96}}}},
        "dense": {"x": {"rows": 1000, "missing": 0, "min": 0.0, "max": 10.0, "mean": 5.0,
                        "histogram": {"edges": [0, 5, 10], "counts": [500, 500]}}},
        "label": {"name": "y", "rows": 1000, "missing": 0, "mean": 0.3, "min": 0, "max": 1,
                  "value_counts": [[0, 700], [1, 300]]},
    }
    current = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = current
        for p in parents:
            node = node[p]
        node[key] = value
    return base, current


@pytest.mark.parametrize("changes, expected", [
    ({"features__f__empty_rows": 300}, ("f", "missing_rate", 0.2)),
    ({"features__f__oov_ids": 90}, ("f", "oov_share", 90 / 900 - 9 / 900)),
    ({"label__mean": 0.4}, ("y", "label_rate", 0.1)),
    # x now lies in [0, 20]: half its histogram, [10, 20], past the baseline's max of 10.
    ({"dense__x__max": 20.0, "dense__x__histogram": {"edges": [0, 10, 20], "counts": [500, 500]}},
     ("x", "out_of_range", 0.5)),
])
def test_each_kind_against_a_baseline(changes, expected):
    base, current = _stats_with(**changes)
    found = {(a.feature, a.kind): a.value for a in find_anomalies(current, base)}
    assert found[expected[:2]] == pytest.approx(expected[2])
    assert find_anomalies(base, copy.deepcopy(base)) == []


def test_capacity_overflow_uses_a_normal_approximation_of_the_current_batches():
    # Baseline p99_9 of 100-row batches: 96 ids. Now 0.95 ids a row: mean 95, sigma (99.09 - 95) / 3.09 = 1.32.
    base, current = _stats_with(features__f__ids_per_row={"mean": 0.95},
                                features__f__capacity={"100": {"max": 100, "p99_9": 99.09}})
    found = {(a.feature, a.kind): a.value for a in find_anomalies(current, base)}
    sigma = (99.09 - 95) / 3.090232306167813
    from math import erfc, sqrt
    assert found[("f", "capacity_overflow")] == pytest.approx(0.5 * erfc((96 - 95) / (sigma * sqrt(2))))


def test_single_ingest_anomalies():
    _, stats = _stats_with(features__f__empty_rows=1000, dense__x__min=3.0, dense__x__max=3.0,
                           label__value_counts=[[1, 1000]], label__mean=1.0)
    kinds = [(a.feature, a.kind) for a in find_anomalies(stats)]
    assert kinds == [("f", "always_missing"), ("x", "constant"), ("y", "label_constant")]


def test_thresholds_come_from_the_validation_key_per_feature(ingests, capsys, tmp_path):
    config = tmp_path / "v.yaml"
    config.write_text("validation:\n  thresholds: {numeric_drift: 0.99, out_of_range: 1}\n"
                      "  features:\n    item_id: {categorical_drift: 1.0}\n")
    code, out, _ = _run(capsys, ingests["drifted"], "--baseline", ingests["train"], "--config", config)
    assert code == 0, out
    config.write_text("validation:\n  features:\n    item_id: {categorical_drift: 1.0}\n")
    code, out, _ = _run(capsys, ingests["drifted"], "--baseline", ingests["train"], "--config", config)
    assert code == 3 and {line.split("\t")[0] for line in out.splitlines()} == {"price"}
    # The ingest's own config may carry the key; a bad one is refused when the ingest loads it.
    own = tmp_path / "own.yaml"
    own.write_text(open(OWN_LOGS).read() + "validation:\n  features:\n    price: {numeric_drift: 0.5}\n")
    assert load_config(str(own)).format == "csv"
    own.write_text(open(OWN_LOGS).read() + "validation:\n  thresholds: {drift: 0.5}\n")
    with pytest.raises(ConfigError, match="validation.thresholds.drift: unknown anomaly kind"):
        load_config(str(own))
    with pytest.raises(ThresholdError, match="validation.features.C1.missing_rate: threshold must be a number >= 0"):
        thresholds_from({"features": {"C1": {"missing_rate": -1}}})


def test_bad_usage_exits_2(ingests, capsys, tmp_path):
    code, _, err = _run(capsys, tmp_path, "--baseline", ingests["train"])
    assert code == 2 and "has no stats.json" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("output: {}\n")
    code, _, err = _run(capsys, ingests["alike"], "--config", bad)
    assert code == 2 and "has no validation: key" in err
    code, _, err = _run(capsys, ingests["alike"], "--baseline")
    assert code == 2 and "--baseline" in err


def test_without_a_baseline_only_single_ingest_anomalies_are_looked_for(ingests, capsys):
    code, out, _ = _run(capsys, ingests["drifted"])
    assert code == 0 and out.strip() == f"{ingests['drifted']}: no anomalies"


def test_an_ingest_with_vocab_from_records_its_drift_against_the_source_and_flags_it(ingests, tmp_path):
    log = _log(tmp_path / "day2.tsv", 3, drift=True, day=1)
    out = tmp_path / "day2"
    run_ingest(["--input", str(log), "--config", OWN_LOGS, "--output", str(out), "--vocab_from", str(ingests["train"])])
    stats = json.loads((out / "stats.json").read_text())
    assert stats["validation"]["baseline"] == str(ingests["train"])
    recorded = {(a["feature"], a["kind"]) for a in stats["validation"]["anomalies"]}
    # The same findings as the command line's, from the same statistics.
    assert recorded == {(a.feature, a.kind) for a in find_anomalies(
        stats, json.loads((ingests["train"] / "stats.json").read_text()), time_columns={"event_time"})}
    assert {feature for feature, _ in recorded} == {"item_id", "price"}
    page = (out / "report.html").read_text()
    flags = page[page.index("<section id='flags'>"):page.index("<section id='label'>")]
    assert f"Flags ({len(recorded)})" in flags and "categorical_drift" in flags and "numeric_drift" in flags
    assert str(ingests["train"]) in flags
    # Without a baseline only the ingest's own anomalies are recorded: none in this log.
    assert json.loads((ingests["alike"] / "stats.json").read_text())["validation"] == {"baseline": None,
                                                                                      "anomalies": []}
