"""report.html: every feature, naturally sorted, with the figures a reader looks for; rendered in Chromium."""

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pipelines.ingest import run_ingest
from pipelines.report import REPORT_SECTIONS, estimate_hash_collisions, natural_key, write_report
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
    cards = re.findall(r"<div class='card'><h3>(\w+)</h3>(.*?)</div>(?=<div class='card'>|</div>)", page, re.S)
    assert [name for name, _ in cards] == ["C2", "C9", "C10", "tags"]
    body = dict(cards)
    # Ids per row only where a row can hold several.
    assert [name for name, text in cards if "ids per row" in text] == ["tags"]
    assert "every bucket taken" in body["C2"]  # 1000 distinct of 1000 buckets
    assert "share a bucket" in body["C10"] and "10.0%" in body["C10"]  # 100 of 1000 rows empty
    assert "3-id vocabulary" in body["C9"] and "bucket" not in body["C9"]
    assert "This output has no label column" in page and "describes no dense features" in page


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
    assert "expected N fields, got N" in letters and ":4</code>" in letters and ":10</code>" in letters
    assert "data:image/png" not in page and "<img" not in page  # nothing that could fail to load


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
