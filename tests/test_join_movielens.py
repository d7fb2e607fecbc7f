"""MovieLens-1M ratings joined at ingest with RecBole-style `.user` and `.item` side tables.

The real sample (/work/shared/data/movielens1m_deepctr_sample.csv, already joined) is split into
ratings.inter, ml.user and ml.item, laid out as RecBole's atomic files are (tab-separated, typed headers
`user_id:token`, genres a space-separated `token_seq`). The ingest joins them back; the expected rows come
from a plain-Python join of the same three files, which must itself give back the sample's own columns.
"""

import collections
import csv
import glob
import json
import os

import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import ingest
from tests.conftest import SHARED_DATA

SAMPLE = SHARED_DATA / "movielens1m_deepctr_sample.csv"

CONFIG = {
    "input": {"format": "tsv", "quote_char": "", "schema": [
        {"name": "user_id", "kind": "dense", "dtype": "int64", "column": "user_id:token"},
        {"name": "movie_id", "kind": "dense", "dtype": "int64", "column": "item_id:token"},
        {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer", "column": "rating:float"},
    ]},
    "join": [
        {"table": "ml.user", "key": "user_id", "columns": ["age", "gender", "occupation"], "schema": [
            {"name": "user_id", "kind": "dense", "dtype": "int64", "column": "user_id:token"},
            {"name": "age", "dtype": "string", "column": "age:token"},
            {"name": "gender", "dtype": "string", "column": "gender:token"},
            {"name": "occupation", "dtype": "string", "column": "occupation:token"},
        ]},
        {"table": "ml.item", "key": "movie_id", "columns": ["genres"], "list_separator": " ", "schema": [
            {"name": "movie_id", "kind": "dense", "dtype": "int64", "column": "item_id:token"},
            {"name": "genres", "dtype": "string", "column": "genre:token_seq"},
        ]},
    ],
    "features": {name: {"vocabulary": {}} for name in ("age", "gender", "occupation", "genres")},
    "output": {"format": "parquet", "num_shards": 1},
}


def _split(directory) -> list[dict]:
    """Writes ratings.inter, ml.user and ml.item from the sample; returns the sample's rows."""
    with open(SAMPLE, newline="") as f:
        sample = list(csv.DictReader(f))
    users, movies = {}, {}
    for row in sample:
        user = (row["age"], row["gender"], row["occupation"], row["zip"])
        movie = (row["title"], row["genres"].replace("|", " "))
        # The sample repeats a user's (a movie's) attributes on every rating: they must agree.
        assert users.setdefault(row["user_id"], user) == user
        assert movies.setdefault(row["movie_id"], movie) == movie
    tables = {
        "ratings.inter": (["user_id:token", "item_id:token", "rating:float", "timestamp:float"],
                          [[r["user_id"], r["movie_id"], r["rating"], r["timestamp"]] for r in sample]),
        "ml.user": (["user_id:token", "age:token", "gender:token", "occupation:token", "zip_code:token"],
                    [[u, *values] for u, values in users.items()]),
        "ml.item": (["item_id:token", "movie_title:token_seq", "genre:token_seq"],
                    [[m, *values] for m, values in movies.items()]),
    }
    for name, (header, rows) in tables.items():
        with open(os.path.join(directory, name), "w", newline="") as f:
            f.write("\t".join(header) + "\n")
            f.writelines("\t".join(cells) + "\n" for cells in rows)
    return sample


def _read_atomic(path) -> list[dict]:
    """A RecBole atomic file as dicts keyed by the header's field names (the part before ':')."""
    with open(path) as f:
        header, *lines = f.read().splitlines()
    names = [field.split(":")[0] for field in header.split("\t")]
    return [dict(zip(names, line.split("\t"))) for line in lines]


def _reference_join(directory) -> collections.Counter:
    users = {u["user_id"]: u for u in _read_atomic(os.path.join(directory, "ml.user"))}
    items = {i["item_id"]: i for i in _read_atomic(os.path.join(directory, "ml.item"))}
    joined = collections.Counter()
    for r in _read_atomic(os.path.join(directory, "ratings.inter")):
        user, item = users.get(r["user_id"]), items.get(r["item_id"])
        joined[(int(r["user_id"]), int(r["item_id"]), int(r["rating"]),
                user["age"] if user else None, user["gender"] if user else None,
                user["occupation"] if user else None, tuple(item["genre"].split(" ")) if item else ())] += 1
    return joined


@pytest.mark.skipif(not SAMPLE.exists(), reason=f"MovieLens sample not present at {SAMPLE}")
def test_ratings_joined_with_users_and_movies_match_a_plain_python_join(tmp_path):
    sample = _split(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the tables' relative paths are resolved at launch, against this directory
    try:
        ingest.run_ingest(["--input", "ratings.inter", "--config", "config.yaml", "--output", "out", "--no_report",
                           "--runner", "FnApiRunner"])
    finally:
        os.chdir(cwd)
    out = tmp_path / "out"
    schema = {s["name"]: s for s in json.loads((out / "schema.json").read_text())["features"]}
    tokens = {}
    for name in ("age", "gender", "occupation", "genres"):
        words = (out / "vocab" / f"{name}.txt").read_text().splitlines()
        tokens[name] = {schema[name]["num_oov_buckets"] + i: w for i, w in enumerate(words)}
    (shard,) = glob.glob(str(out / "part-*.parquet"))
    got = collections.Counter()
    for row in pq.read_table(shard).to_pylist():
        one = {name: [tokens[name][i] for i in row[name]] for name in ("age", "gender", "occupation")}
        got[(row["user_id"], row["movie_id"], row["rating"], *(v[0] if v else None for v in one.values()),
             tuple(tokens["genres"][i] for i in row["genres"]))] += 1
    expected = _reference_join(tmp_path)
    assert got == expected
    # Every rating's user and movie are in the tables: the join gives back the sample's own columns.
    assert expected == collections.Counter(
        (int(r["user_id"]), int(r["movie_id"]), int(r["rating"]), r["age"], r["gender"], r["occupation"],
         tuple(r["genres"].split("|"))) for r in sample)
    stats = json.loads((out / "stats.json").read_text())
    assert [(j["key"], j["rows_matched"], j["rows_unmatched"]) for j in stats["joins"]] == [
        ("user_id", 200, 0), ("movie_id", 200, 0)]
