"""History ingests keep every other column: the example's own event's values, and per-item lists beside the items."""

import collections
import json
import re

import pytest

from pipelines.config import ConfigError, parse_config
from pipelines.ingest import main
from transforms.testing import ingest_in_memory

SCHEMA = [
    {"name": "user", "kind": "dense", "dtype": "int64"},
    {"name": "item", "kind": "dense", "dtype": "string"},
    {"name": "ts", "kind": "dense", "dtype": "int64"},
    {"name": "rating", "kind": "dense", "dtype": "float32"},
    {"name": "category", "kind": "dense", "dtype": "string"},   # describes the item: one per event
    {"name": "occupation", "kind": "sparse", "dtype": "string"},  # describes the user
    {"name": "country", "kind": "sparse", "dtype": "string"},     # the context of the event
    {"name": "age", "kind": "dense", "dtype": "int64"},
]
EVENTS = [
    {"user": 1, "item": "a", "ts": 10, "rating": 4.0, "category": "x", "occupation": ["nurse"], "country": ["fr"],
     "age": 30},
    {"user": 1, "item": "b", "ts": 20, "rating": 2.0, "category": "y", "occupation": ["nurse"], "country": ["de"],
     "age": 30},
    {"user": 1, "item": "c", "ts": 30, "rating": 5.0, "category": "x", "occupation": ["nurse"], "country": [],
     "age": None},
    {"user": 2, "item": "b", "ts": 5, "rating": 1.0, "category": "y", "occupation": ["cook"], "country": ["fr"],
     "age": 41},
    {"user": 2, "item": "d", "ts": 6, "rating": 3.0, "category": "z", "occupation": ["cook", "poet"],
     "country": ["it"], "age": 41},
]


def _config(per_event=True, **histories):
    return {
        "input": {"format": "jsonl", "schema": SCHEMA},
        "histories": {"key": "user", "item": "item", "time": "ts", "weight": "rating",
                      "item_columns": ["category"], "examples_per_event": per_event, **histories},
        "features": {name: {"vocabulary": {"num_oov_buckets": 1}} for name in
                     ("item", "category", "occupation", "country")},
        "output": {"num_shards": 1, "shuffle": False},
        "stats": {"batch_sizes": [4]},
    }


def _index(column):
    """Each value's vocabulary index: 1 + its rank by count over every event (ties by value)."""
    counts = collections.Counter()
    for e in EVENTS:
        values = e[column] if isinstance(e[column], list) else [e[column]]
        counts.update(values)
    ranked = sorted(counts, key=lambda v: (-counts[v], v))
    return {v: 1 + i for i, v in enumerate(ranked)}


def test_examples_carry_their_events_columns_and_per_item_lists():
    out = ingest_in_memory(EVENTS, _config())
    item, category, occupation, country = (_index(c) for c in ("item", "category", "occupation", "country"))
    expected = []
    by_user = collections.defaultdict(list)
    for e in EVENTS:
        by_user[e["user"]].append(e)
    for user, events in by_user.items():
        events.sort(key=lambda e: e["ts"])
        for j, e in enumerate(events):
            history = events[:j]
            if not history:
                continue
            expected.append({
                "user": user, "ts": e["ts"],
                "item": [item[h["item"]] for h in history],
                "item__weights": [h["rating"] for h in history],
                "category": [category[h["category"]] for h in history],
                "target_item": item[e["item"]], "target_rating": e["rating"],
                "target_category": category[e["category"]],
                "occupation": [occupation[v] for v in e["occupation"]],
                "country": [country[v] for v in e["country"]],
                "age": e["age"],
            })
    assert sorted(out.rows, key=lambda r: (r["user"], r["ts"])) == expected
    roles = {f.name: f.history_role for f in out.schema}
    assert roles == {"user": "key", "item": "item", "category": "item_column", "ts": "time",
                     "target_item": "target", "target_rating": "target", "target_category": "target",
                     "occupation": "event", "country": "event", "age": "event"}
    assert out.schema["target_category"].id_space == out.schema["category"].id_space
    assert out.schema["occupation"].vocabulary_size == 1 + 3


def test_one_row_per_key_carries_the_latest_events_columns():
    out = ingest_in_memory(EVENTS, _config(per_event=False))
    occupation, category = _index("occupation"), _index("category")
    got = {r["user"]: (r["category"], r["occupation"], r["age"]) for r in out.rows}
    assert got == {
        1: ([category["x"], category["y"], category["x"]], [occupation["nurse"]], None),
        2: ([category["y"], category["z"]], [occupation["cook"], occupation["poet"]], 41),
    }


def test_hashed_side_columns_share_the_targets_id_space():
    import keras

    config = _config()
    config["features"] = {"item": {"hash_buckets": 1000}, "category": {"hash_buckets": 50},
                          "occupation": {"hash_buckets": 70}, "country": {"hash_buckets": 30, "salt": 7}}
    out = ingest_in_memory(EVENTS, config)
    category = keras.layers.Hashing(num_bins=50)
    country = keras.layers.Hashing(num_bins=30, salt=7)
    row = next(r for r in out.rows if r["user"] == 2)
    assert row["category"] == [int(category(["y"]).numpy()[0])]
    assert row["target_category"] == int(category(["z"]).numpy()[0])
    assert row["country"] == [int(country(["it"]).numpy()[0])]
    assert out.schema["target_category"].hash_buckets == 50


@pytest.mark.parametrize("change, key, words", [
    ({"schema": SCHEMA + [{"name": "gender", "kind": "dense", "dtype": "string"}]}, "histories", "'gender'"),
    ({"schema": SCHEMA + [{"name": "liked", "kind": "label", "dtype": "int64"}]}, "histories", "'liked' is a label"),
    ({"item_columns": ["occupation"]}, "histories.item_columns[0]", "one value per event"),
    ({"item_columns": ["category", "age"]}, "histories.item_columns[1]", "needs hash_buckets or a vocabulary"),
    ({"item_columns": ["nope"]}, "histories.item_columns[0]", "not in the schema"),
    ({"item_columns": ["rating"]}, "histories.item_columns[0]", "already the history's weight"),
    ({"key": "occupation"}, "histories.key", "one value per event"),
    ({"item": "country"}, "histories.item", "one value per event"),
])
def test_side_columns_no_model_can_take_are_refused_by_name(change, key, words):
    config = _config()
    if "schema" in change:
        config["input"]["schema"] = change["schema"]
    else:
        config["histories"].update(change)
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'") + ".*" + re.escape(words)):
        parse_config(config)


def test_the_cli_exits_2_naming_the_column(tmp_path, capsys):
    config = _config()
    config["input"]["schema"] = SCHEMA + [{"name": "gender", "kind": "dense", "dtype": "string"}]
    (tmp_path / "c.json").write_text(json.dumps(config))
    (tmp_path / "log.jsonl").write_text("")
    with pytest.raises(SystemExit) as e:
        main(["--input", str(tmp_path / "log.jsonl"), "--config", str(tmp_path / "c.json"),
              "--output", str(tmp_path / "out")])
    assert e.value.code == 2
    assert "'gender'" in capsys.readouterr().err


def test_vocab_from_reuses_the_item_columns_vocabulary_for_lists_and_targets(tmp_path):
    first = ingest_in_memory(EVENTS, _config(), output_dir=str(tmp_path / "a"))
    later = [dict(e, category="new" if e["user"] == 2 else e["category"]) for e in EVENTS]
    second = ingest_in_memory(later, {**_config(), "vocab_from": str(tmp_path / "a")})
    for name in ("category", "target_category", "item", "target_item"):
        assert second.schema[name].id_space == first.schema[name].id_space
    category = _index("category")
    row = next(r for r in second.rows if r["user"] == 2)
    assert row["category"] == [0] and row["target_category"] == 0  # "new" is out of the vocabulary
    assert [r["category"] for r in second.rows if r["user"] == 1][-1] == [category["x"], category["y"]]
    assert second.schema["category"].oov_ids == 2  # one history entry, one target
