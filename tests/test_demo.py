"""The demo program: synthetic log -> read_logs -> Parquet shards + schema.json + dead letters."""

import json
import os

import pyarrow.compute as pc

from pipelines import demo
from sparse_io import Schema, criteo_schema, read_parquet_shard


def test_demo_writes_shards_schema_and_dead_letters(tmp_path, capsys):
    out = str(tmp_path / "demo")
    summary = demo.main(["--output", out, "--rows", "1500", "--shards", "3", "--seed", "7"])
    assert "dead letters       2" in capsys.readouterr().out
    assert summary["records"] == 1500 and summary["dead_letters"] == 2 and summary["rows_read"] == 1498
    assert summary["padded_lines"] > 0
    assert sorted(os.listdir(out)) == [
        "errors",
        "part-00000-of-00003.parquet",
        "part-00001-of-00003.parquet",
        "part-00002-of-00003.parquet",
        "raw",
        "schema.json",
    ]
    schema = Schema.load(out)
    assert schema == criteo_schema()
    tables = [read_parquet_shard(p, schema) for p in summary["shards"]]
    assert sum(t.num_rows for t in tables) == 1498 and all(t.num_rows in (499, 500) for t in tables)
    assert all(set(pc.unique(t.column("label")).to_pylist()) <= {0, 1} for t in tables)
    with open(summary["dead_letters_file"]) as f:
        letters = [json.loads(line) for line in f]
    assert len(letters) == 2 and all("not-a-number" in d["raw"] for d in letters)


def test_demo_is_reproducible_for_a_seed():
    assert demo.synthetic_criteo_lines(50, seed=3) == demo.synthetic_criteo_lines(50, seed=3)
    assert demo.synthetic_criteo_lines(50, seed=3) != demo.synthetic_criteo_lines(50, seed=4)
