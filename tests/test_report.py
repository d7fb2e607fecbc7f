"""report.html: every feature, naturally sorted, with the figures a reader looks for; rendered in Chromium."""

import collections
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pipelines.ingest import run_ingest
from pipelines.report import REPORT_SECTIONS, estimate_hash_collisions, natural_key, write_report
from pipelines.report_svg import format_count, format_duration, format_number, format_rate, format_timestamp
from pipelines.synthetic import synthetic_criteo_lines
from tests.conftest import REPO_ROOT

DEMO_CONFIG = str(REPO_ROOT / "pipelines" / "configs" / "demo.yaml")


def test_natural_order_puts_c2_before_c10():
    names = ["C10", "C2", "C1", "I10", "I9", "label", "C19"]
    assert sorted(names, key=natural_key) == ["C1", "C2", "C10", "C19", "I9", "I10", "label"]


def test_hash_collision_estimate_matches_a_simulated_hashing():
    rng = np.random.default_rng(4)
    for raw_ids, buckets in ((20_000, 50_000), (3_000, 1_000_000), (900, 1_000)):
        occupied = np.unique(rng.integers(0, buckets, raw_ids)).size  # each raw id lands in a random bucket
        estimated, lost = estimate_hash_collisions(occupied, buckets)
        assert estimated == pytest.approx(raw_ids, rel=0.05)
        assert lost == pytest.approx(raw_ids - occupied, rel=0.15, abs=3)
    assert estimate_hash_collisions(100, 100) is None  # saturated: any larger count fits
    with pytest.raises(ValueError, match="distinct_buckets <= buckets"):
        estimate_hash_collisions(11, 10)


def _feature(rows, lengths_max, distinct, top, empty=0):
    return {"rows": rows, "empty_rows": empty,
            "ids_per_row": {"mean": 1.5 if lengths_max > 1 else 0.9, "p50": 1.0, "p99": 3.0, "max": lengths_max},
            "distinct_ids": distinct, "distinct_ids_exact": True, "top_ids": top, "top_ids_exact": True,
            "capacity": {"256": {"max": 300, "p99_9": 260}}}


def test_cards_say_per_feature_what_matters(tmp_path):
    stats = {"format_version": 1, "num_rows": 1000, "features": {
        "C10": _feature(1000, 1, 400, [[5, 90]], empty=100),
        "C2": _feature(1000, 1, 1000, [[1, 50]]),
        "tags": _feature(1000, 4, 30, [[2, 700], [3, 200]]),
        "C9": _feature(1000, 1, 3, [[1, 600]]),
    }}
    schema = {"format_version": 1, "features": [
        {"name": "C2", "kind": "sparse", "hash_buckets": 1000},
        {"name": "C10", "kind": "sparse", "hash_buckets": 1_000_000},
        {"name": "C9", "kind": "sparse", "vocabulary_size": 3},
        {"name": "tags", "kind": "sparse"},
    ]}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    page = open(write_report(str(tmp_path), {"rows_in": 1000, "rows_out": 1000})).read()
    # Each card carries its id (the summary table's rows link to it).
    card = r"<div class='card' id='f-\w+'><h3>(\w+)</h3>(.*?)</div>(?=<div class='card'|</div>)"
    cards = re.findall(card, page, re.S)
    assert [name for name, _ in cards] == ["C2", "C9", "C10", "tags"]
    body = dict(cards)
    # Ids per row only where a row can hold several.
    assert [name for name, text in cards if "ids per row" in text] == ["tags"]
    assert "every bucket taken" in body["C2"]  # 1000 distinct of 1000 buckets
    assert "share a bucket" in body["C10"] and "10.0%" in body["C10"]  # 100 of 1000 rows empty
    assert "3-id vocabulary" in body["C9"] and "bucket" not in body["C9"]
    assert "This output has no label column" in page and "describes no dense features" in page


def test_figures_read_as_dates_durations_counts_and_rates():
    # A millisecond timestamp of 2024-04-05 was written as `1.71e+03G`.
    assert format_number(1_712_275_200_000) == "1.71T"
    assert "e+" not in format_number(9.99e17) and format_number(3e20) == "3e+20"
    # Between 1,000 and 10,000 three significant digits were written `2.2e+03`: whole numbers instead.
    assert [format_number(v) for v in (2203.5, 999.5, 9999.4, -1500.25, 999.4)] == ["2204", "1000", "9999", "-1500",
                                                                                    "999"]
    assert format_timestamp(1_712_275_200_000, "ms") == "2024-04-05"  # 19818 days after 1970-01-01
    assert format_timestamp(1_712_275_200 + 3 * 3600 + 62, "s") == "2024-04-05 03:01:02"
    assert format_timestamp(1_712_275_200_000_000, "us") == "2024-04-05"
    with pytest.raises(ValueError, match="unit must be one of"):
        format_timestamp(1, "days")
    assert format_duration(7 * 86400) == "7 days" and format_duration(90) == "1.5 min"
    assert format_duration(36 * 3600) == "1.5 days" and format_duration(2 * 365.25 * 86400) == "2 years"
    assert format_count(1_234_567) == "1,234,567" and format_count(48_412.6) == "48,413"
    assert format_rate(0.2534) == "25.3%"


def _time_column(rows, first_ms, last_ms):
    edges = list(np.linspace(first_ms, last_ms, 21))
    return {"rows": rows, "missing": 0, "min": first_ms, "max": last_ms, "mean": (first_ms + last_ms) / 2,
            "quantiles": {k: first_ms for k in ("p1", "p25", "p50", "p75", "p99")},
            "histogram": {"scale": "linear", "edges": edges, "counts": [rows // 20] * 20},
            "sample_size": 10_000, "sample_exact": False}


def test_a_timestamp_column_shows_dates_and_its_span_and_counts_show_separators(tmp_path):
    day = 1_712_275_200_000  # 2024-04-05 00:00 UTC, in ms
    stats = {"format_version": 1, "num_rows": 2_500_000, "features": {
        "C1": {**_feature(2_500_000, 1, 90_000, [[5, 90]]), "ids_per_row": {"mean": 1.0, "p50": 1, "p99": 1, "max": 1}},
    }, "dense": {"ts": _time_column(2_500_000, day, day + 3 * 86_400_000),
                 "clicked": {**_time_column(2_500_000, 0, 1), "mean": 0.2534, "value_counts": [[0, 7], [1, 3]]}}}
    schema = {"format_version": 1, "features": [
        {"name": "C1", "kind": "sparse", "hash_buckets": 100_000},
        {"name": "ts", "kind": "dense", "dtype": "int64", "time_unit": "ms"},
    ]}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    page = open(write_report(str(tmp_path), {"rows_in": 2_500_000, "rows_out": 2_500_000})).read()
    dense = page[page.index("<section id='dense'>"):page.index("<section id='dead-letters'>")]
    assert "G<" not in dense and "T<" not in dense and "e+" not in dense
    assert "2024-04-05 &hellip; 2024-04-08 (3 days)" in dense
    assert ">2024-04-05<" in dense and ">2024-04-08<" in dense  # the histogram's end labels
    assert "from a sample of 10,000" in dense
    assert "rate 25.3%" in dense  # a 0/1 column's mean is a rate
    # 90,000 of 100,000 buckets: n = ln(0.1) / ln(1 - 1e-5) raw ids, n - 90,000 of them share a bucket.
    raw = np.log(0.1) / np.log1p(-1e-5)
    assert f"&asymp; {round(raw - 90_000):,} of &asymp; {round(raw):,} raw ids" in page
    assert "2,500,000" in page


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    lines = synthetic_criteo_lines(400, seed=11)
    lines[3] += "\textra"  # 41 fields
    lines[9] += "\tone\ttwo"  # 42 fields: the same reason, another count
    log = root / "day.tsv"
    log.write_text("\n".join(lines) + "\n")
    summary = run_ingest(["--input", str(log), "--config", DEMO_CONFIG, "--output", str(root / "out")])
    return root / "out", summary, lines


def test_the_ingest_report_shows_every_feature_dense_label_and_dead_letters(ingested):
    out, summary, lines = ingested
    page = (out / "report.html").read_text()
    for section in REPORT_SECTIONS:
        assert f"<section id='{section}'>" in page, section
    sparse = page[page.index("<section id='sparse'>"):page.index("<section id='dense'>")]
    assert re.findall(r"<h3>(\w+)</h3>", sparse) == [f"C{i}" for i in range(1, 27)]
    dense = page[page.index("<section id='dense'>"):page.index("<section id='dead-letters'>")]
    assert re.findall(r"<h3>(\w+)</h3>", dense) == [f"I{i}" for i in range(1, 14)]
    assert dense.count("<svg class='chart'") == 13  # a histogram per dense feature
    # The label's balance, computed here from the log's first field (the two bad lines are not written).
    labels = [int(line.split("\t")[0]) for i, line in enumerate(lines) if i not in (3, 9)]
    label = page[page.index("<section id='label'>"):page.index("<section id='sparse'>")]
    assert f"{labels.count(1) / len(labels):.1%}" in label
    letters = page[page.index("<section id='dead-letters'>"):]
    # One group for one kind of problem, its reasons written as they are (not with digits masked).
    reason_cells = re.findall(r"<tr><td>(.*?)</td>", letters)
    assert len(reason_cells) == 1 and "N" not in reason_cells[0]
    assert "expected 40 fields, got 41 (1)" in reason_cells[0] and "expected 40 fields, got 42 (1)" in reason_cells[0]
    assert ":4</code>" in letters and ":10</code>" in letters
    assert "data:image/png" not in page and "<img" not in page  # nothing that could fail to load


def test_stats_name_the_raw_values_of_each_sparse_feature_and_the_report_shows_them(ingested):
    out, _, lines = ingested
    stats = json.loads((out / "stats.json").read_text())
    good = [line.split("\t") for i, line in enumerate(lines) if i not in (3, 9)]
    for feature in ("C1", "C14", "C26"):
        column = int(feature[1:]) + 13  # label, I1..I13, then C1..C26
        counter = collections.Counter(f[column] for f in good if column < len(f) and f[column] != "")
        raw = stats["features"][feature]["raw_values"]
        total = sum(counter.values())
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:len(raw["top"])]
        assert raw["values"] == total and raw["distinct"] == len(counter) and raw["exact"]
        assert raw["top"] == [[v, c, c / total] for v, c in ranked]
    sparse = (out / "report.html").read_text().split("<section id='sparse'>")[1].split("</section>")[0]
    first = stats["features"]["C1"]["raw_values"]["top"][0]
    assert f">{first[0]}</text>" in sparse and "top raw values" in sparse


def test_the_report_draws_its_charts_without_a_plotting_library(ingested, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    out, summary, _ = ingested
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    page = open(write_report(str(copy), summary)).read()
    assert page.count("<svg class='chart'") == 1 + 26 + 13  # label, top ids per sparse feature, dense histograms


_CHECK = """<script>window.addEventListener('load', () => {
  const sections = {};
  for (const id of %s) {
    const e = document.getElementById(id);
    sections[id] = e ? e.getBoundingClientRect().height : -1;
  }
  const images = [...document.images];
  const charts = [...document.querySelectorAll('svg')];
  const out = document.createElement('pre'); out.id = 'render-check';
  out.textContent = JSON.stringify({sections, images: images.length,
    broken: images.filter(i => !i.complete || i.naturalWidth === 0).length,
    charts: charts.length, drawn: charts.filter(s => s.getBoundingClientRect().width > 0).length});
  document.body.appendChild(out);
});</script>"""


def _chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    return found


def test_the_report_renders_in_headless_chromium(ingested, tmp_path):
    browser = _chromium()
    out, _, _ = ingested
    page = (out / "report.html").read_text()
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", _CHECK % json.dumps(list(REPORT_SECTIONS)) + "</body>"))
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=5000"]
    dom = subprocess.run([*flags, "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"<pre id=\"render-check\">(.*?)</pre>", dom.stdout)
    assert found, dom.stderr[-2000:]
    check = json.loads(found.group(1))
    assert check["broken"] == 0
    assert all(height > 0 for height in check["sections"].values()), check["sections"]
    assert check["charts"] > 26 and check["drawn"] == check["charts"]
    screenshot = tmp_path / "report.png"
    subprocess.run([*flags, "--window-size=1400,4200", "--hide-scrollbars", f"--screenshot={screenshot}",
                    (out / "report.html").as_uri()], capture_output=True, timeout=120)
    assert screenshot.exists() and screenshot.stat().st_size > 10_000


def test_flags_at_the_top_name_a_feature_that_is_always_missing(tmp_path):
    stats = {"format_version": 1, "num_rows": 50, "features": {
        "C1": {**_feature(50, 1, 0, []), "empty_rows": 50}, "C2": _feature(50, 1, 7, [[1, 9]])}}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    page = open(write_report(str(tmp_path), {"rows_in": 50, "rows_out": 50})).read()
    flags = page[page.index("<section id='flags'>"):page.index("<section id='label'>")]
    assert page.index("<section id='flags'>") < page.index("<section id='sparse'>")
    assert re.findall(r"<tr><td><code>(\w+)</code></td><td class='warn'>(\w+)</td>", flags) == [
        ("C1", "always_missing")]
    assert "no baseline compared" in flags


def test_every_in_page_link_lands_on_one_element_and_ids_are_unique(tmp_path):
    stats = {"format_version": 1, "num_rows": 50, "features": {"C1": _feature(50, 1, 7, [[1, 9]]),
                                                                "odd name/2": _feature(50, 1, 3, [[1, 9]])},
             "dense": {"I1": _time_column(50, 0, 10)},
             "label": {"name": "rating", "rows": 50, "missing": 0, "mean": 3.5, "min": 1, "max": 5,
                       "quantiles": {k: 3 for k in ("p1", "p25", "p50", "p75", "p99")},
                       "histogram": {"scale": "linear", "edges": [1, 3, 5], "counts": [20, 30]}},
             "validation": {"baseline": None, "anomalies": [
                 {"feature": "C9", "kind": "feature_missing", "value": 1, "threshold": 0, "detail": "baseline only"},
                 {"feature": "odd name/2", "kind": "constant", "value": 1, "threshold": 0, "detail": "x"},
                 {"feature": "(dead letters)", "kind": "dead_letters", "value": 0.1, "threshold": 0.001,
                  "detail": "5 of 50 rows read (10.00%): bad"}]}}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    page = open(write_report(str(tmp_path), {"rows_in": 55, "rows_out": 50})).read()
    ids = re.findall(r"\bid='([^']+)'", page)
    assert len(ids) == len(set(ids))
    targets = re.findall(r"href='#([^']+)'", page)
    assert set(targets) <= set(ids) and len(targets) == 4 + 2  # 4 table rows; the flags of cards that exist
    assert {"f-C1", "f-odd_20name_2f2", "f-I1", "f-rating", "dead-letters"} <= set(targets)


def test_the_page_refers_to_nothing_outside_itself(ingested):
    out, _, _ = ingested
    page = (out / "report.html").read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    outside = page.replace("xmlns='http://www.w3.org/2000/svg'", "")
    for pattern in (r"https?://", r"\bsrc\s*=", r"<link\b", r"@import", r"url\(", r"@font-face", r"fetch\(",
                    r"XMLHttpRequest"):
        assert not re.search(pattern, outside), pattern
