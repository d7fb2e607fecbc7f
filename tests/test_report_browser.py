"""report.html of the real samples in headless Chromium: the table sorts and filters, links land, nothing loads.

Each test ingests one of the real logs described in ../shared/data/README.md
(skipping when it is absent), opens the report in headless Chromium with a
small script appended that clicks the table's headers, types into its filter
and records what the page then shows (`--dump-dom`), and takes a screenshot.
Expected values come from the logs and stats.json, read here independently
of the report. Every test skips when Chromium is not installed.
"""

import collections
import json
import re
import shutil
import subprocess

import pytest
from conftest import SHARED_DATA

from pipelines.ingest import run_ingest
from pipelines.report import REPORT_SECTIONS, natural_key
from tests.conftest import REPO_ROOT

DEMO_CONFIG = REPO_ROOT / "pipelines" / "configs" / "demo.yaml"
CRITEO_TRAIN = SHARED_DATA / "criteo_paddlerec_dnn_train.tsv"
CRITEO_TEST = SHARED_DATA / "criteo_paddlerec_dnn_test.tsv"
CRITEO_STRIPPED = SHARED_DATA / "criteo_paddlerec_ctr_dnn_train.tsv"
AVAZU = SHARED_DATA / "avazu_deepctr_sample.csv"
MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
YOOCHOOSE = SHARED_DATA / "yoochoose-clicks-sample.dat"

# Appended to a copy of the report: acts as a reader would, then writes what the page shows into <pre id=check>.
_CHECK = """<script>window.addEventListener('load', () => {
  const table = document.getElementById('features-table');
  const body = table.tBodies[0];
  const names = () => [...body.rows].map(r => r.cells[0].textContent);
  const shown = r => r.getBoundingClientRect().height > 0;
  const visible = () => [...body.rows].filter(shown).map(r => r.cells[0].textContent);
  const heads = [...table.tHead.rows[0].cells];
  const column = name => heads.find(h => h.textContent === name);
  const out = {initial: names(), texts: [...body.rows].map(r => r.textContent),
               first_section: document.querySelector('section').id};
  column('missing').click(); out.missing_up = names();
  column('missing').click(); out.missing_down = names();
  column('distinct').click(); out.distinct_up = names();
  column('feature').click(); out.feature_up = names();
  const filter = document.getElementById('features-filter');
  filter.value = %(query)s; filter.dispatchEvent(new Event('input'));
  out.filtered = visible(); out.shown = document.getElementById('features-shown').textContent;
  filter.value = ''; filter.dispatchEvent(new Event('input'));
  out.unfiltered = visible().length;
  const targets = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1));
  out.links = targets.length;
  out.dangling = targets.filter(id => !document.getElementById(id));
  out.row_links = [...body.rows].map(r => r.querySelector('a').getAttribute('href'));
  out.resources = performance.getEntriesByType('resource').map(e => e.name);
  const texts = r => [...r.cells].map(c => c.textContent);
  const rows = selector => [...document.querySelectorAll(selector)].slice(1).map(texts);
  out.flags = rows('#flags tr').map(cells => cells.slice(0, 2));
  const height = id => document.getElementById(id).getBoundingClientRect().height;
  out.sections = Object.fromEntries(%(sections)s.map(id => [id, height(id)]));
  out.titles = [...document.querySelectorAll('svg > title')].map(t => t.textContent);
  out.undrawn = [...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().width === 0).length;
  out.letters = rows('#dead-letters tr');
  const pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def _chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    return found


def _need(*paths):
    for path in paths:
        if not path.exists():
            pytest.skip(f"real sample {path.name} not present at {SHARED_DATA}")


def _flags(browser, tmp_path):
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000"]


def _look(out_dir, tmp_path, query):
    """What the page shows after the checker's clicks and typing (the dict `_CHECK` writes)."""
    browser = _chromium()
    page = (out_dir / "report.html").read_text()
    checked = tmp_path / f"checked-{out_dir.name}.html"
    checked.write_text(page.replace("</body>", _CHECK % {"query": json.dumps(query),
                                                         "sections": json.dumps(list(REPORT_SECTIONS))} + "</body>"))
    dom = subprocess.run([*_flags(browser, tmp_path), "--dump-dom", checked.as_uri()], capture_output=True, text=True,
                         timeout=120)
    found = re.search(r"<pre id=\"check\">(.*?)</pre>", dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    import html

    return json.loads(html.unescape(found.group(1)))


def _screenshot(out_dir, tmp_path, height=3000):
    browser = _chromium()
    shot = tmp_path / f"{out_dir.name}.png"
    subprocess.run([*_flags(browser, tmp_path), f"--window-size=1400,{height}", "--hide-scrollbars",
                    f"--screenshot={shot}", (out_dir / "report.html").as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000  # a blank page compresses to a few kB
    try:
        from PIL import Image
    except ImportError:  # the pixels are looked at where Pillow is installed (the plots extra)
        return shot
    pixels = list(Image.open(shot).convert("RGB").getdata())
    background = collections.Counter(pixels).most_common(1)[0][0]
    drawn = sum(p != background for p in pixels) / len(pixels)
    assert drawn > 0.03, f"{shot}: only {drawn:.1%} of the pixels differ from the background"
    assert (0x3B, 0x6E, 0xA8) in set(pixels), "no bar of a chart is visible"
    return shot


def _features(stats):
    """{name: (missing share, distinct or None)} of every feature the table lists, from stats.json."""
    out = {}
    for name, s in stats["features"].items():
        raw = s.get("raw_values") or {}
        out[name] = (s["empty_rows"] / s["rows"], raw.get("distinct", s.get("distinct_ids")))
    for name, s in (stats.get("dense") or {}).items():
        out[name] = (s["missing"] / s["rows"], len(s["value_counts"]) if s.get("value_counts") is not None else None)
    if stats.get("label"):
        s = stats["label"]
        out[s["name"]] = (s.get("missing", 0) / s["rows"], len(s["value_counts"]) if s.get("value_counts") else None)
    return out


def _assert_table_works(seen, stats, query):
    features = _features(stats)
    names = sorted(features, key=natural_key)
    assert seen["first_section"] == "flags"
    assert seen["initial"] == names and seen["feature_up"] == names
    missing = [features[n][0] for n in seen["missing_up"]]
    assert sorted(seen["missing_up"]) == sorted(names) and missing == sorted(missing)
    down = [features[n][0] for n in seen["missing_down"]]
    assert down == sorted(missing, reverse=True)
    if len(set(missing)) > 1:
        assert seen["missing_up"] != seen["missing_down"]
    distinct = [features[n][1] for n in seen["distinct_up"]]
    counted = [d for d in distinct if d is not None]
    assert counted == sorted(counted) and distinct[:len(distinct) - len(counted)] == [None] * (
        len(distinct) - len(counted))  # rows without a count first
    # The filter keeps exactly the rows whose text holds the query, in any case.
    expected = [n for n, text in zip(seen["initial"], seen["texts"]) if query.lower() in text.lower()]
    assert seen["filtered"] == expected and 0 < len(expected) < len(names)
    assert seen["shown"] == f"{len(expected)} of {len(names)} features shown"
    assert seen["unfiltered"] == len(names)
    # Every in-page link lands on an element; each row links to its own card.
    assert seen["dangling"] == [] and seen["links"] >= len(names)
    assert len(seen["row_links"]) == len(set(seen["row_links"])) == len(names)
    assert seen["resources"] == []  # nothing was fetched
    assert all(h > 0 for h in seen["sections"].values()), seen["sections"]
    assert seen["undrawn"] == 0


def _criteo_config(tmp_path, **changes):
    text = DEMO_CONFIG.read_text()
    for old, new in changes.items():
        text = text.replace(old, new)
    path = tmp_path / "criteo.yaml"
    path.write_text(text)
    return str(path)


def test_criteo_test_day_against_its_training_day_sorts_filters_and_draws_both(tmp_path):
    _need(CRITEO_TRAIN, CRITEO_TEST)
    _chromium()
    train, test = tmp_path / "train", tmp_path / "test"
    run_ingest(["--input", str(CRITEO_TRAIN), "--config", str(DEMO_CONFIG), "--output", str(train)])
    run_ingest(["--input", str(CRITEO_TEST), "--config", str(DEMO_CONFIG), "--output", str(test),
                "--vocab_from", str(train)])
    stats = json.loads((test / "stats.json").read_text())
    seen = _look(test, tmp_path, "I1")
    _assert_table_works(seen, stats, "I1")
    assert {"I1", "I10", "I11", "I12", "I13"} <= set(seen["filtered"])
    # The flags are the comparison stats.json records, in its order.
    recorded = [[a["feature"], a["kind"]] for a in stats["validation"]["anomalies"]]
    assert stats["validation"]["baseline"] == str(train) and seen["flags"] == recorded
    # Compared: each sparse card draws both sides' top values, each dense card with a histogram both histograms.
    base = json.loads((train / "stats.json").read_text())
    paired = {t.split(":")[0][len("top values of "):] for t in seen["titles"] if t.endswith("baseline and this ingest")}
    assert paired == {n for n in stats["features"] if stats["features"][n].get("raw_values", {}).get("top")
                      and base["features"][n].get("raw_values", {}).get("top")}
    both = {n for n in stats["dense"] if "histogram" in stats["dense"][n] and "histogram" in base["dense"][n]}
    assert {t[len("baseline histogram of "):] for t in seen["titles"] if t.startswith("baseline histogram")} == both
    assert len(both) >= 10
    _screenshot(test, tmp_path)


@pytest.mark.slow
def test_criteo_lines_with_stripped_fields_are_dead_letters_shown_with_their_text_and_lines(tmp_path):
    _need(CRITEO_STRIPPED)
    config = _criteo_config(tmp_path, **{"schema: criteo": "schema: criteo\n  strict: true",
                                         "error_budget: 0.01": "error_budget: 0.5"})
    out = tmp_path / "stripped"
    summary = run_ingest(["--input", str(CRITEO_STRIPPED), "--config", config, "--output", str(out)])
    lines = CRITEO_STRIPPED.read_text().split("\n")
    short = collections.Counter(len(line.split("\t")) for line in lines if line and len(line.split("\t")) != 40)
    assert short == {38: 33, 37: 3}  # as the data README counts them
    assert summary["bad_records"] == 36
    seen = _look(out, tmp_path, "C2")
    _assert_table_works(seen, json.loads((out / "stats.json").read_text()), "C2")
    (reason, count, share, examples), = seen["letters"]  # one kind of problem: a short line
    assert "expected 40 fields, got 38 (strict mode) (33)" in reason and "got 37 (strict mode) (3)" in reason
    assert count == "36" and share.startswith("36.00%") and "flagged" in share
    first = [i + 1 for i, line in enumerate(lines) if line and len(line.split("\t")) != 40][:3]
    for number in first:
        assert f"{CRITEO_STRIPPED}:{number} " in examples
        assert lines[number - 1][:20].replace("\t", " ") in examples.replace("\t", " ")
    assert ["(dead letters)", "dead_letters"] in seen["flags"]
    _screenshot(out, tmp_path, height=1800)


_OTHERS = {
    "avazu": (AVAZU, """input:
  format: csv
  schema:
    - {name: click, kind: label, dtype: int64}
    - {name: hour, kind: dense, dtype: int64}
    - {name: banner_pos, kind: sparse, dtype: string}
    - {name: site_id, kind: sparse, dtype: string}
    - {name: site_category, kind: sparse, dtype: string}
    - {name: app_id, kind: sparse, dtype: string}
    - {name: device_model, kind: sparse, dtype: string}
    - {name: device_type, kind: sparse, dtype: string}
    - {name: C14, kind: sparse, dtype: string}
features: {"*": {hash_buckets: 10000}}
output: {format: parquet, num_shards: 1}
""", "site", {("hour", "constant")}),
    "movielens": (MOVIELENS, """input:
  format: csv
  list_separator: "|"
  schema:
    - {name: user_id, kind: sparse, dtype: string}
    - {name: movie_id, kind: sparse, dtype: string}
    - {name: rating, kind: label, dtype: int64, label_type: integer}
    - {name: timestamp, kind: dense, dtype: timestamp, unit: s}
    - {name: genres, kind: sparse, dtype: string}
    - {name: gender, kind: sparse, dtype: string}
    - {name: age, kind: dense, dtype: int64}
    - {name: zip, kind: sparse, dtype: string}
features: {"*": {hash_buckets: 10000}}
output: {format: parquet, num_shards: 1}
""", "id", set()),
    "yoochoose": (YOOCHOOSE, """input:
  format: csv
  skip_header: false
  schema:
    - {name: session_id, kind: sparse, dtype: string}
    - {name: timestamp, kind: dense, dtype: timestamp, unit: ms}
    - {name: item_id, kind: sparse, dtype: string}
    - {name: category, kind: sparse, dtype: string}
features: {"*": {hash_buckets: 10000}}
output: {format: parquet, num_shards: 1}
""", "_id", {("category", "constant")}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_OTHERS))
def test_other_real_logs_render_a_working_report_flagging_their_constant_columns(name, tmp_path):
    path, config, query, constant = _OTHERS[name]
    _need(path)
    _chromium()
    (tmp_path / "c.yaml").write_text(config)
    out = tmp_path / name
    run_ingest(["--input", str(path), "--config", str(tmp_path / "c.yaml"), "--output", str(out)])
    stats = json.loads((out / "stats.json").read_text())
    seen = _look(out, tmp_path, query)
    _assert_table_works(seen, stats, query)
    # Avazu's hour is 14102100 in every row, Yoochoose's category 0 (the data README): flagged, and nothing else.
    assert {tuple(f) for f in seen["flags"]} == constant
    _screenshot(out, tmp_path, height=2000)
