"""ingest_in_memory: the real ingest on a few in-memory lines; shards' rows, schema, stats and dead letters."""

import json

import pyarrow as pa
import pytest

from pipelines.config import ConfigError
from pipelines.errors import UsageError
from sparse_io.hashing import hash_ids_arrow
from transforms.testing import ingest_in_memory


def _line(i):
    cats = [f"{i * 26 + j:08x}" for j in range(26)]
    return "\t".join([str(i % 2), str(i), *[""] * 12, *cats])


LINES = [_line(i) for i in range(12)]
CONFIG = {
    "input": {"format": "criteo"},
    "features": {"C*": {"hash_buckets": 1000}},
    "output": {"num_shards": 2, "seed": 3},
    "stats": {"batch_sizes": [4]},
    "error_budget": 0.5,
}


def test_rows_schema_stats_and_dead_letters_of_a_config(tmp_path):
    out = ingest_in_memory([*LINES, "1\tnot-a-number"], CONFIG, output_dir=str(tmp_path / "out"))
    assert len(out.shards) == 2 and sum(t.num_rows for t in out.shards) == 12
    by_i1 = {row["I1"]: row for row in out.rows}
    assert sorted(by_i1) == [float(i) for i in range(12)]
    # Hashing itself is checked against keras.layers.Hashing in test_hash_ids; here, that the config's
    # 1000 buckets were applied to the ids of the lines given.
    raw_c1 = pa.array([[f"{i * 26:08x}"] for i in range(12)], pa.list_(pa.string()))
    expected_c1 = hash_ids_arrow(raw_c1, 1000).to_pylist()
    assert [by_i1[float(i)]["C1"] for i in range(12)] == expected_c1
    assert [by_i1[float(i)]["label"] for i in range(12)] == [i % 2 for i in range(12)]
    assert out.schema["C1"].hash_buckets == 1000 and out.schema["C1"].dtype == "int64"
    assert out.stats["num_rows"] == 12
    assert out.summary["rows_in"] == 13 and out.summary["bad_records"] == 1 and out.summary["num_shards"] == 2
    assert [(d["line"], "I1" in d["reason"]) for d in out.dead_letters] == [(13, True)]
    # Kept where asked, as the ingest wrote it.
    assert out.output_dir == str(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["num_rows"] == 12


def test_a_config_file_and_a_temporary_output(tmp_path):
    path = tmp_path / "ingest.yaml"
    path.write_text("input: {format: jsonl, schema: [{name: label, kind: label}, {name: item, dtype: string}]}\n"
                    "features: {item: {hash_buckets: 50}}\noutput: {num_shards: 1}\n")
    out = ingest_in_memory([{"label": 1, "item": ["a", "a"]}, {"label": 0, "item": []}], str(path))
    assert out.output_dir is None
    assert sorted((r["label"], len(r["item"])) for r in out.rows) == [(0, 0), (1, 2)]
    (ids,) = [r["item"] for r in out.rows if r["label"] == 1]
    assert ids[0] == ids[1] and 0 <= ids[0] < 50
    assert out.schema["item"].hash_buckets == 50 and out.dead_letters == []


def test_errors_are_the_ingests():
    with pytest.raises(UsageError, match="error budget"):
        ingest_in_memory([*LINES, "1\tx"], {**CONFIG, "error_budget": 0.0})
    with pytest.raises(ConfigError, match="output.num_shards"):
        ingest_in_memory(LINES, {**CONFIG, "output": {"num_shards": 0}})
    with pytest.raises(TypeError, match="config must be a path or a mapping"):
        ingest_in_memory(LINES, 3)
