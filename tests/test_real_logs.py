"""Real public logs that are not Criteo, ingested as they come; expected values from Python's csv module.

The files are described in ../shared/data/README.md; every test skips when they are absent.
"""

import collections
import csv
import datetime
import glob
import json
import os

import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA

from pipelines.config import parse_config
from pipelines.ingest import run_ingest
from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file

MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
YOOCHOOSE = SHARED_DATA / "yoochoose-clicks-sample.dat"
AVAZU = SHARED_DATA / "avazu_deepctr_sample.csv"


def _need(path):
    if not path.exists():
        pytest.skip(f"real sample {path.name} not present at {SHARED_DATA}")
    return str(path)


def _csv_rows(path, **kwargs):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f, **kwargs))


def _shard_rows(directory):
    rows = []
    for path in sorted(glob.glob(os.path.join(directory, "part-*.parquet"))):
        rows.append(pq.read_table(path).to_pylist())
    return rows


def _millis(text):
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(when.timestamp() * 1000)


# --- MovieLens-1M: quoted commas in titles, |-separated genres, unix seconds, integer ratings ---------


MOVIELENS_SCHEMA = Schema([
    FeatureSpec("user_id", "dense", "int64"),
    FeatureSpec("movie_id", "sparse", "int64"),
    FeatureSpec("rating", "label", "int64", label_type="integer"),
    FeatureSpec("timestamp", "dense", "int64", time_unit="s"),
    FeatureSpec("title", "sparse", "string"),
    FeatureSpec("genres", "sparse", "string"),
])


def test_movielens_titles_with_commas_and_genre_lists_read_exactly():
    path = _need(MOVIELENS)
    header, *expected = _csv_rows(path)
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "csv", MOVIELENS_SCHEMA, dead_letters=sink) for r in b.to_pylist()]
    assert sink.bad == 0 and len(rows) == len(expected) == 200
    col = {name: header.index(name) for name in header}
    for row, want in zip(rows, expected):
        assert row["title"] == [want[col["title"]]]
        assert row["genres"] == want[col["genres"]].split("|")
        assert row["rating"] == int(want[col["rating"]])
        assert row["timestamp"] == int(want[col["timestamp"]])
    assert sum("," in r["title"][0] for r in rows) == sum("," in w[col["title"]] for w in expected) > 0
    lengths = collections.Counter(len(r["genres"]) for r in rows)
    assert lengths == {1: 60, 2: 86, 3: 40, 4: 12, 5: 2}  # as the data README counts them
    assert collections.Counter(r["rating"] for r in rows) == {1: 10, 2: 23, 3: 54, 4: 65, 5: 48}


def test_movielens_ratings_as_a_click_label_are_dead_letters_naming_the_value():
    path = _need(MOVIELENS)
    schema = MOVIELENS_SCHEMA.replace("rating", label_type=None)
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "csv", schema, dead_letters=sink) for r in b.to_pylist()]
    ratings = [int(w[2]) for w in _csv_rows(path)[1:]]
    assert len(rows) == ratings.count(1) == 10 and sink.bad == 190
    assert all("is not 0 or 1" in d.reason for d in sink)
    assert {d.reason.split()[2] for d in sink} == {"2", "3", "4", "5"}


def test_movielens_as_semicolon_separated_tsv_and_csv_give_the_same_rows(tmp_path):
    path = _need(MOVIELENS)
    original = _csv_rows(path)
    expected = [r for b in read_file(path, "csv", MOVIELENS_SCHEMA) for r in b.to_pylist()]
    for fmt, name, delimiter in (("csv", "ml.csv", ";"), ("tsv", "ml.tsv", None)):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f, delimiter=delimiter or "\t", lineterminator="\n").writerows(original)
        options = {"delimiter": delimiter} if delimiter else {}
        got = [r for b in read_file(str(tmp_path / name), fmt, MOVIELENS_SCHEMA, **options) for r in b.to_pylist()]
        assert got == expected


# --- Yoochoose: no header, ISO-8601 milliseconds, session histories -------------------------------------


def _yoochoose_config(shuffle=False, num_shards=2):
    return {
        "input": {
            "format": "csv",
            "skip_header": False,
            "schema": [
                {"name": "session_id", "kind": "dense", "dtype": "int64"},
                {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "ms"},
                {"name": "item_id", "kind": "dense", "dtype": "int64"},
                {"name": "category", "kind": "dense", "dtype": "string"},
            ],
        },
        "histories": {"key": "session_id", "item": "item_id", "time": "timestamp", "max_length": 50,
                      "examples_per_event": True, "item_columns": ["category"]},
        "features": {"item_id": {"hash_buckets": 1000}, "category": {"hash_buckets": 10}},
        "output": {"format": "parquet", "num_shards": num_shards, "shuffle": shuffle, "seed": 0},
        "stats": {"batch_sizes": [16]},
    }


def test_yoochoose_iso_timestamps_become_exact_milliseconds():
    path = _need(YOOCHOOSE)
    config = parse_config(_yoochoose_config())
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "csv", config.schema, skip_header=False, dead_letters=sink)
            for r in b.to_pylist()]
    expected = _csv_rows(path)
    assert sink.bad == 0 and len(rows) == len(expected) == 500
    assert [r["timestamp"] for r in rows] == [_millis(w[1]) for w in expected]
    assert rows[0]["timestamp"] == 1396867869277  # 2014-04-07T10:51:09.277Z


def test_yoochoose_histories_sort_on_time_and_come_out_in_key_time_order(tmp_path):
    path = _need(YOOCHOOSE)
    config_path = tmp_path / "yoochoose.json"
    config_path.write_text(json.dumps(_yoochoose_config()))
    out = str(tmp_path / "out")
    run_ingest(["--input", path, "--config", str(config_path), "--output", out, "--no_report",
                "--progress_seconds", "0"])
    schema = json.loads(open(os.path.join(out, "schema.json")).read())
    assert {f["name"]: f.get("time_unit") for f in schema["features"]}["timestamp"] == "ms"

    # Independent reference: per session, clicks ordered by (time, item); each click's history is the
    # session's strictly earlier clicks.
    sessions = collections.defaultdict(list)
    for sid, stamp, item, _ in _csv_rows(path):
        sessions[int(sid)].append((_millis(stamp), int(item)))
    expected = []
    for sid in sorted(sessions):
        clicks = sorted(sessions[sid])
        for t, _ in clicks:
            earlier = [c for c in clicks if c[0] < t]
            if earlier:
                expected.append((sid, t, len(earlier[-50:])))
    assert len(expected) == 375  # as the data README counts them

    shards = _shard_rows(out)
    got = [(r["session_id"], r["timestamp"], len(r["item_id"])) for shard in shards for r in shard]
    assert sorted(got) == expected
    seen = set()
    for shard in shards:
        keys = [(r["session_id"], r["timestamp"]) for r in shard]
        assert keys == sorted(keys)  # each shard in (key, time) order
        sessions_here = {r["session_id"] for r in shard}
        assert not sessions_here & seen  # a session's rows all in one shard
        seen |= sessions_here


# --- Avazu: a 20-digit id above the int64 range ----------------------------------------------------------


def test_avazu_ids_above_int64_are_read_as_strings_not_mangled():
    path = _need(AVAZU)
    header, *expected = _csv_rows(path)
    schema = Schema([FeatureSpec("id", "sparse", "string"), FeatureSpec("click", "label", "int64"),
                     FeatureSpec("hour", "sparse", "string"), FeatureSpec("site_id", "sparse", "string")])
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "csv", schema, dead_letters=sink) for r in b.to_pylist()]
    assert sink.bad == 0 and len(rows) == 100
    assert [r["id"] for r in rows] == [[w[0]] for w in expected]
    assert sum(int(w[0]) > 2**63 - 1 for w in expected) == 93
    assert collections.Counter(r["click"] for r in rows) == {0: 80, 1: 20}


def test_avazu_ids_above_int64_declared_as_integers_are_refused_by_name():
    path = _need(AVAZU)
    schema = Schema([FeatureSpec("id", "sparse", "int64"), FeatureSpec("click", "label", "int64")])
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "csv", schema, dead_letters=sink) for r in b.to_pylist()]
    expected = _csv_rows(path)[1:]
    fits = [int(w[0]) for w in expected if int(w[0]) <= 2**63 - 1]
    assert [r["id"] for r in rows] == [[i] for i in fits] and len(fits) == 7
    assert sink.bad == 93 and all("out of int64 range" in d.reason and "id" in d.reason for d in sink)
