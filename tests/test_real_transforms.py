"""Crosses and a shared vocabulary on the real samples in ../shared/data (skipped when absent).

Avazu: site_id x app_id and site_id x banner_pos (an integer column) crossed, site_category and
app_category (both hashed category codes) sharing one vocabulary. MovieLens: gender x the
genre list, the Cartesian product per row. Expected ids come from keras `HashedCrossing` / `Hashing` on the
raw cells read with Python's csv module, the vocabulary from `collections.Counter`.
"""

import collections
import csv

import pytest
from conftest import SHARED_DATA

from transforms.testing import ingest_in_memory

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _need(name: str):
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real sample {name} not present at {SHARED_DATA}")
    return path


def _cells(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _crossed(num_bins, *columns):
    layer = keras.layers.HashedCrossing(num_bins=num_bins)
    return [int(v) for v in layer(tuple(tf.constant(c) for c in columns)).numpy()]


def _hashed(num_bins, values):
    return [int(v) for v in keras.layers.Hashing(num_bins)(tf.constant(values)).numpy()]


def test_avazu_crosses_and_a_shared_category_vocabulary(tmp_path):
    path = _need("avazu_deepctr_sample.csv")
    schema = [{"name": "click", "kind": "label", "dtype": "int64"},
              {"name": "banner_pos", "kind": "dense", "dtype": "int64"},
              *({"name": n, "dtype": "string"} for n in ("site_id", "site_category", "app_id", "app_category"))]
    config = {"input": {"format": "csv", "schema": schema},
              "features": {"site_id": {"hash_buckets": 1000}, "app_id": {"hash_buckets": 1000},
                           "site_category": {"vocabulary": {"shared": "category"}},
                           "app_category": {"vocabulary": {"shared": "category"}},
                           "site_x_app": {"cross": ["site_id", "app_id"], "hash_buckets": 10007},
                           "site_x_pos": {"cross": ["site_id", "banner_pos"], "hash_buckets": 101}},
              "output": {"num_shards": 1}}
    out = ingest_in_memory(path.read_text(encoding="utf-8").splitlines(), config, output_dir=str(tmp_path / "out"))
    rows = _cells(path)
    counts = collections.Counter([r["site_category"] for r in rows] + [r["app_category"] for r in rows])
    tokens = (tmp_path / "out" / "vocab" / "category.txt").read_text().splitlines()
    assert tokens == sorted(counts, key=lambda t: (-counts[t], t))
    index = {t: i + 1 for i, t in enumerate(tokens)}
    sites, apps = [r["site_id"] for r in rows], [r["app_id"] for r in rows]
    expected = collections.Counter(zip(
        _hashed(1000, sites), _hashed(1000, apps), _crossed(10007, sites, apps),
        _crossed(101, sites, [int(r["banner_pos"]) for r in rows]),
        (index[r["site_category"]] for r in rows), (index[r["app_category"]] for r in rows)))
    got = collections.Counter((r["site_id"][0], r["app_id"][0], *r["site_x_app"], *r["site_x_pos"],
                               r["site_category"][0], r["app_category"][0]) for r in out.rows)
    assert got == expected and sum(got.values()) == 100
    assert out.schema["site_category"].id_space == out.schema["app_category"].id_space


def test_movielens_gender_crossed_with_the_genre_list(tmp_path):
    path = _need("movielens1m_deepctr_sample.csv")
    schema = [{"name": "user_id", "kind": "dense", "dtype": "int64"},
              {"name": "movie_id", "kind": "dense", "dtype": "int64"},
              {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
              {"name": "gender", "dtype": "string"}, {"name": "genres", "dtype": "string"}]
    config = {"input": {"format": "csv", "schema": schema},
              "features": {"gender": {"hash_buckets": 10}, "genres": {"hash_buckets": 100},
                           "gender_x_genres": {"cross": ["gender", "genres"], "hash_buckets": 997,
                                               "max_per_row": 3}},
              "output": {"num_shards": 1}}
    out = ingest_in_memory(path.read_text(encoding="utf-8").splitlines(), config, output_dir=str(tmp_path / "out"))
    rows = _cells(path)
    expected, dropped = collections.Counter(), 0
    for r in rows:
        genres = r["genres"].split("|")
        ids = _crossed(997, [r["gender"]] * len(genres), genres)[:3]
        dropped += max(0, len(genres) - 3)
        expected[(int(r["user_id"]), int(r["movie_id"]), tuple(ids))] += 1
    got = collections.Counter((r["user_id"], r["movie_id"], tuple(r["gender_x_genres"])) for r in out.rows)
    assert got == expected
    overflow = out.stats["features"]["gender_x_genres"]["cross_overflow"]
    assert overflow == {"rows": 14, "dropped": dropped, "max_per_row": 3} and dropped == 16  # 12 x 4, 2 x 5 genres
