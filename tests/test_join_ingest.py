"""The ingest with `join:` on generated logs: rows against a plain-Python join, counts, both ways identical,
refusals exiting 2 in one line, and `--vocab_from` reusing a joined column's vocabulary."""

import csv
import glob
import json
import os
import random

import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import ingest

OCCUPATIONS = ["doctor", "artist", "writer", "lawyer", "nurse"]


def _write_logs(directory, seed=0, events=400, users=60, missing_users=True):
    """events.csv (event_id, user_id, item, rating) and users.tsv (user_id, age, occupation, tags).

    Users 0..users-1 are in the table except every 7th; events name users 0..users+9 (the last ten are
    absent), and every 25th event has no user_id. Returns (events, users) as parsed Python rows.
    """
    rng = random.Random(seed)
    table = []
    for u in range(users):
        if u % 7 == 3:
            continue
        age = "" if u % 11 == 0 else str(rng.choice([1, 18, 25, 35, 45, 50, 56]))
        tags = "|".join(rng.sample(["x", "y", "z"], rng.randint(0, 2)))
        table.append({"user_id": u, "age": age, "occupation": rng.choice(OCCUPATIONS), "tags": tags})
    rows = []
    for i in range(events):
        user = "" if i % 25 == 0 and missing_users else str(rng.randrange(users + 10))
        rows.append({"event_id": i, "user_id": user, "item": f"m{rng.randrange(30)}", "rating": rng.randint(1, 5)})
    with open(os.path.join(directory, "events.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, ["event_id", "user_id", "item", "rating"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    rng.shuffle(table)  # table order is not key order
    with open(os.path.join(directory, "users.tsv"), "w", newline="") as f:
        writer = csv.DictWriter(f, ["user_id", "age", "occupation", "tags"], delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    return rows, table


def _config(directory, table="users.tsv", **join_settings):
    config = {
        "input": {"format": "csv", "schema": [
            {"name": "event_id", "kind": "dense", "dtype": "int64"},
            {"name": "user_id", "kind": "dense", "dtype": "int64"},
            {"name": "item", "kind": "sparse", "dtype": "string"},
            {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
        ]},
        "features": {"item": {"hash_buckets": 64}, "occupation": {"vocabulary": {}}, "tags": {"vocabulary": {}}},
        "join": [{"table": table, "key": "user_id", "columns": ["age", "occupation", "tags"], "format": "tsv",
                  "schema": [{"name": "age", "kind": "dense", "dtype": "int64"}], **join_settings}],
        "output": {"format": "parquet", "num_shards": 2, "shuffle": True, "seed": 5},
    }
    path = os.path.join(directory, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def _run(directory, config, out, *extra):
    cwd = os.getcwd()
    os.chdir(directory)  # the table path is relative: resolved against the launch directory
    try:
        return ingest.run_ingest(["--input", "events.csv", "--config", config, "--output", out, "--no_report",
                                  "--runner", "FnApiRunner", *extra])
    finally:
        os.chdir(cwd)


def _shards(out):
    return [pq.read_table(p) for p in sorted(glob.glob(os.path.join(out, "part-*.parquet")))]


def _decoded_rows(out):
    """Every row of the output, the vocabulary ids turned back into their tokens, keyed by event_id."""
    vocab = {}
    for name in ("occupation", "tags"):
        with open(os.path.join(out, "vocab", f"{name}.txt")) as f:
            tokens = f.read().splitlines()
        schema = json.load(open(os.path.join(out, "schema.json")))
        oov = next(s["num_oov_buckets"] for s in schema["features"] if s["name"] == name)
        vocab[name] = {oov + i: t for i, t in enumerate(tokens)}
    rows = {}
    for table in _shards(out):
        for row in table.to_pylist():
            rows[row["event_id"]] = {"age": row["age"],
                                     "occupation": [vocab["occupation"][i] for i in row["occupation"]],
                                     "tags": [vocab["tags"][i] for i in row["tags"]]}
    return rows


def _expected(events, table):
    by_user = {u["user_id"]: u for u in table}
    expected, matched = {}, 0
    for e in events:
        user = by_user.get(int(e["user_id"])) if e["user_id"] else None
        matched += user is not None
        expected[e["event_id"]] = {
            "age": int(user["age"]) if user and user["age"] else None,
            "occupation": [user["occupation"]] if user else [],
            "tags": user["tags"].split("|") if user and user["tags"] else [],
        }
    return expected, matched


@pytest.fixture(scope="module")
def joined_both_ways(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("join"))
    events, table = _write_logs(directory)
    side = _run(directory, _config(directory), "out_side")
    grouped = _run(directory, _config(directory, side_input_max_mb=0, num_partitions=4), "out_cogroup")
    return directory, events, table, side, grouped


def test_each_event_gets_its_user_s_columns_or_missing_values(joined_both_ways):
    directory, events, table, _, _ = joined_both_ways
    expected, _ = _expected(events, table)
    assert _decoded_rows(os.path.join(directory, "out_side")) == expected


def test_stats_json_counts_matched_and_unmatched_events(joined_both_ways):
    directory, events, table, _, _ = joined_both_ways
    _, matched = _expected(events, table)
    for out, way in (("out_side", "side_input"), ("out_cogroup", "co_group_by_key")):
        stats = json.load(open(os.path.join(directory, out, "stats.json")))
        (entry,) = stats["joins"]
        assert entry == {"join": 0, "table": os.path.join(directory, "users.tsv"), "key": "user_id",
                         "columns": ["age", "occupation", "tags"], "way": way,
                         "rows_matched": matched, "rows_unmatched": len(events) - matched}
        assert 0 < matched < len(events)


def test_side_input_and_cogroupbykey_write_identical_shards(joined_both_ways):
    directory, _, _, _, _ = joined_both_ways
    side, grouped = _shards(os.path.join(directory, "out_side")), _shards(os.path.join(directory, "out_cogroup"))
    assert len(side) == len(grouped) == 2
    for a, b in zip(side, grouped):
        assert a.equals(b)
    for name in ("schema.json", "vocab/occupation.txt", "vocab/tags.txt"):
        assert open(os.path.join(directory, "out_side", name)).read() == \
            open(os.path.join(directory, "out_cogroup", name)).read()


def test_the_manifest_lists_the_table_as_an_input(joined_both_ways):
    directory = joined_both_ways[0]
    manifest = json.load(open(os.path.join(directory, "out_side", "_MANIFEST.json")))
    assert os.path.join(directory, "users.tsv") in [i["path"] for i in manifest["inputs"]]


def test_vocab_from_reuses_the_joined_columns_vocabularies(joined_both_ways):
    directory, _, _, _, _ = joined_both_ways
    later = os.path.join(directory, "later")
    os.makedirs(later)
    events, table = _write_logs(later, seed=1, users=40)
    _run(later, _config(later), "out", "--vocab_from", os.path.join(directory, "out_side"))
    for name in ("occupation", "tags"):
        assert open(os.path.join(later, "out", "vocab", f"{name}.txt")).read() == \
            open(os.path.join(directory, "out_side", "vocab", f"{name}.txt")).read()
    def id_spaces(out):
        return {s["name"]: s.get("id_space") for s in json.load(open(os.path.join(out, "schema.json")))["features"]}

    spaces, train = id_spaces(os.path.join(later, "out")), id_spaces(os.path.join(directory, "out_side"))
    assert spaces["occupation"] == train["occupation"] and spaces["tags"] == train["tags"]
    expected, _ = _expected(events, table)
    assert _decoded_rows(os.path.join(later, "out")) == expected


def _exit(capsys, directory, config):
    with pytest.raises(SystemExit) as info:
        ingest.main(["--input", os.path.join(directory, "events.csv"), "--config", config, "--output",
                     os.path.join(directory, "out_fail"), "--no_report", "--runner", "FnApiRunner"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return info.value.code, err.strip().splitlines()[-1]


@pytest.mark.parametrize("way", [{}, {"side_input_max_mb": 0}])
def test_a_duplicated_key_is_refused_naming_table_key_and_example(tmp_path, capsys, way):
    _write_logs(str(tmp_path))
    with open(tmp_path / "users.tsv", "a") as f:
        f.write("5\t30\tdoctor\t\n5\t40\tnurse\t\n")  # user 5 twice more
    config = _config(str(tmp_path), str(tmp_path / "users.tsv"), **way)
    code, line = _exit(capsys, str(tmp_path), config)
    assert code == 2, line
    assert "users.tsv: join key 'user_id' is duplicated: 5 occurs in" in line
    assert not os.path.exists(tmp_path / "out_fail" / "_MANIFEST.json")


def test_a_table_lacking_the_key_column_is_refused(tmp_path, capsys):
    _write_logs(str(tmp_path))
    text = (tmp_path / "users.tsv").read_text().replace("user_id\t", "uid\t", 1)
    (tmp_path / "users.tsv").write_text(text)
    config = _config(str(tmp_path), str(tmp_path / "users.tsv"))
    code, line = _exit(capsys, str(tmp_path), config)
    assert code == 2 and "users.tsv: the header lacks column(s) ['user_id']" in line, line


def test_a_missing_table_is_refused_naming_the_key(tmp_path, capsys):
    _write_logs(str(tmp_path))
    config = _config(str(tmp_path), str(tmp_path / "nobody.tsv"))
    code, line = _exit(capsys, str(tmp_path), config)
    assert code == 2 and "config key 'join[0].table'" in line and "nobody.tsv' matches no files" in line, line


@pytest.mark.parametrize("way", [{}, {"side_input_max_mb": 0}])
def test_validate_only_serialises_either_way_for_dataflow(tmp_path, way):
    _write_logs(str(tmp_path))
    config = _config(str(tmp_path), "gs://bucket/users.tsv", **way)
    summary = ingest.run_ingest([
        "--input", str(tmp_path / "events.csv"), "--config", config,
        "--output", "gs://bucket/out", "--runner", "DataflowRunner", "--project", "my-project",
        "--region", "europe-west4", "--temp_location", "gs://bucket/tmp", "--validate_only",
    ])
    assert summary["validated"]


def test_a_history_ingest_carries_joined_columns_as_event_columns(tmp_path):
    _, table = _write_logs(str(tmp_path), missing_users=False)  # a history needs every event's key
    config = {
        "input": {"format": "csv", "schema": [
            {"name": "event_id", "kind": "dense", "dtype": "int64"},
            {"name": "user_id", "kind": "dense", "dtype": "int64"},
            {"name": "item", "kind": "dense", "dtype": "string"},
            {"name": "rating", "kind": "dense", "dtype": "int64"},
        ]},
        "join": [{"table": str(tmp_path / "users.tsv"), "key": "user_id", "columns": ["age"], "format": "tsv",
                  "schema": [{"name": "age", "kind": "dense", "dtype": "int64"}]}],
        "histories": {"key": "user_id", "item": "item", "time": "event_id", "examples_per_event": True},
        "features": {"item": {"hash_buckets": 64}},
        "output": {"num_shards": 1, "shuffle": False},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    ingest.run_ingest(["--input", str(tmp_path / "events.csv"), "--config", str(tmp_path / "config.yaml"),
                       "--output", str(tmp_path / "out"), "--no_report", "--runner", "FnApiRunner"])
    ages = {u["user_id"]: int(u["age"]) if u["age"] else None for u in table}
    rows = [row for shard in _shards(str(tmp_path / "out")) for row in shard.to_pylist()]
    assert rows and all(row["age"] == ages.get(row["user_id"]) for row in rows)
    schema = {s["name"]: s for s in json.load(open(tmp_path / "out" / "schema.json"))["features"]}
    assert schema["age"]["history_role"] == "event"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_jsonl_or_parquet_table_joins_as_the_tsv_one_does(joined_both_ways, fmt):
    import pyarrow as pa

    directory, _, table, _, _ = joined_both_ways
    rows = [{"user_id": u["user_id"], "age": int(u["age"]) if u["age"] else None, "occupation": u["occupation"],
             "tags": u["tags"].split("|") if u["tags"] else []} for u in table]
    path = os.path.join(directory, f"users.{fmt}")
    if fmt == "jsonl":
        with open(path, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    config = _config(directory, f"users.{fmt}", format=fmt)
    _run(directory, config, f"out_{fmt}")
    for a, b in zip(_shards(os.path.join(directory, "out_side")), _shards(os.path.join(directory, f"out_{fmt}"))):
        assert a.equals(b)


def test_a_table_record_that_cannot_be_read_refuses_the_table_naming_its_line(tmp_path, capsys):
    _write_logs(str(tmp_path))
    with open(tmp_path / "users.tsv", "a") as f:
        f.write("999\tforty\tdoctor\t\n")  # age is declared int64
    lines = (tmp_path / "users.tsv").read_text().splitlines()
    code, line = _exit(capsys, str(tmp_path), _config(str(tmp_path), str(tmp_path / "users.tsv")))
    assert code == 2, line
    assert f"users.tsv:{len(lines)}: age: 'forty'" in line


def test_joined_batches_are_never_pickled_on_the_side_input_path(tmp_path, pickled_batches):
    # (The CoGroupByKey path's tagged batches are keyed tuples that cross a shuffle: not checked here.)
    directory = str(tmp_path)
    _write_logs(directory, events=50)
    _run(directory, _config(directory), "out")
    assert sum(t.num_rows for t in _shards(os.path.join(directory, "out"))) == 50
    assert pickled_batches == []
