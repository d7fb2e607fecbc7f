"""WriteShards: every row written exactly once, globally shuffled, repeatable with a seed."""

import json
import os
import threading

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from sparse_io import FeatureSpec, Schema, read_parquet_shard, read_tfrecord_shard, shard_name
from transforms.beam import WriteShards, in_process_options, infer_schema, shard_writer

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("items", "sparse", "int64", weighted=True),
    ]
)


def _batches(rows=200, size=23):
    rng = np.random.default_rng(1)
    items = [[int(v) for v in rng.integers(0, 1000, rng.integers(0, 4))] for _ in range(rows)]
    table = pa.table(
        {
            "label": pa.array(np.arange(rows), pa.int64()),  # the row id, to check each row once
            "price": pa.array(rng.random(rows).astype(np.float32), mask=rng.random(rows) < 0.2),
            "items": pa.array(items, pa.list_(pa.int64())),
            "items__weights": pa.array([[0.5] * len(r) for r in items], pa.list_(pa.float32())),
        }
    )
    batches = table.to_batches(max_chunksize=size)
    return table, batches + [batches[0].slice(0, 0)]


def _run(*jobs):
    """Runs one pipeline holding a WriteShards per (out, batches, kwargs) job."""
    with BeamPipeline(options=in_process_options()) as p:
        for i, (out, batches, kwargs) in enumerate(jobs):
            summary = p | f"Create{i}" >> beam.Create(batches) | f"Write{i}" >> WriteShards(out, **kwargs)
            rows = summary | f"Rows{i}" >> beam.Map(lambda s: s["num_rows"])
            assert_that(rows, equal_to([sum(b.num_rows for b in batches)]), label=f"rows{i}")


def test_parquet_shards_hold_each_row_once_shuffled_and_repeatable(tmp_path):
    table, batches = _batches()
    out = str(tmp_path / "a")
    os.makedirs(out)
    stale = os.path.join(out, shard_name(0, 9, ".parquet"))
    open(stale, "w").close()  # from an earlier run with another shard count
    open(os.path.join(out, ".tmp-abc-part-00000-of-00004.parquet"), "w").close()
    options = dict(num_shards=4, schema=SCHEMA, row_group_size=16)
    again, other = str(tmp_path / "b"), str(tmp_path / "c")
    _run(
        (out, batches, dict(seed=5, **options)),
        (again, list(reversed(batches)), dict(seed=5, **options)),
        (other, batches, dict(seed=6, **options)),
    )
    names = _written(out)
    assert names == [shard_name(i, 4, ".parquet") for i in range(4)] + ["schema.json", "stats.json"]
    shards = [read_parquet_shard(os.path.join(out, n), SCHEMA) for n in names[:4]]
    written = pa.concat_tables(shards)
    assert sorted(written.column("label").to_pylist()) == list(range(200))
    by_id = {r["label"]: r for r in written.to_pylist()}
    for row in table.to_pylist():
        assert by_id[row["label"]] == row
    order = written.column("label").to_pylist()
    assert order != sorted(order) and all(s.num_rows for s in shards)  # shuffled across and within shards
    assert pq.ParquetFile(os.path.join(out, names[0])).metadata.row_group(0).num_rows <= 16
    assert Schema.load(out) == SCHEMA
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    assert stats["num_rows"] == 200 and list(stats["features"]) == ["items"]
    # The same seed and input (in another order) give identical shards; another seed other shards.
    for name in names[:4]:
        first = read_parquet_shard(os.path.join(out, name))
        assert first.equals(read_parquet_shard(os.path.join(again, name)))
    assert not all(
        read_parquet_shard(os.path.join(out, n)).equals(read_parquet_shard(os.path.join(other, n)))
        for n in names[:4]
    )


def test_tfrecord_shards_inferred_schema_counted_shards_and_empty_ones(tmp_path):
    table, batches = _batches(rows=30, size=7)
    out, many = str(tmp_path / "t"), str(tmp_path / "m")
    _run(
        (out, batches, dict(format="tfrecord", shuffle=False, rows_per_shard=10)),
        (many, batches[:1], dict(num_shards=12, schema=SCHEMA)),
    )
    names = _written(out)
    assert names == [shard_name(i, 3, ".tfrecord") for i in range(3)] + ["schema.json", "stats.json"]
    schema = Schema.load(out)
    assert schema == infer_schema(batches[0].schema) == SCHEMA
    written = pa.concat_tables([read_tfrecord_shard(os.path.join(out, n), schema) for n in names[:3]])
    assert sorted(written.column("label").to_pylist()) == list(range(30))
    # More shards than rows: only the shards that got rows are kept (at most one per row), renumbered
    # so that readers can still count on every index; never a run of empty files.
    kept = sorted(n for n in os.listdir(many) if n.startswith("part-"))
    assert 1 <= len(kept) <= 7 and kept == [shard_name(i, len(kept), ".parquet") for i in range(len(kept))]
    counts = [read_parquet_shard(os.path.join(many, n)).num_rows for n in kept]
    assert sum(counts) == 7 and min(counts) >= 1


def _written(out: str) -> list[str]:
    """The output's files, after checking the writer's records (left for the commit) against a read of each file."""
    from sparse_io.manifest import file_checksum
    from sparse_io.write_records import WRITE_RECORDS_FILE, load_write_records

    names = sorted(os.listdir(out))
    records = load_write_records(out)
    names.remove(WRITE_RECORDS_FILE)
    shards = [n for n in names if n.startswith("part-")]
    assert sorted(records) == sorted(shards + ["schema.json", "stats.json"])
    for name, record in records.items():
        path = os.path.join(out, name)
        assert (record["bytes"], record["crc32c"]) == (os.path.getsize(path), file_checksum(path)), name
    return names


def test_fewer_rows_than_shards_give_one_shard_per_row_at_most(tmp_path):
    _, batches = _batches(rows=5, size=5)
    out, none = str(tmp_path / "few"), str(tmp_path / "none")
    _run(
        (out, batches, dict(num_shards=10_000, schema=SCHEMA, seed=2)),
        (none, [batches[0].slice(0, 0)], dict(num_shards=50, schema=SCHEMA, seed=2)),
    )
    kept = sorted(n for n in os.listdir(out) if n.startswith("part-"))
    assert 1 <= len(kept) <= 5 and kept == [shard_name(i, len(kept), ".parquet") for i in range(len(kept))]
    rows = pa.concat_tables([read_parquet_shard(os.path.join(out, n), SCHEMA) for n in kept])
    assert sorted(rows.column("label").to_pylist()) == list(range(5))
    assert _written(none) == [shard_name(0, 1, ".parquet"), "schema.json", "stats.json"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="format"):
        WriteShards("x", format="csv")
    with pytest.raises(ValueError, match="num_shards"):
        WriteShards("x", num_shards=0)
    with pytest.raises(ValueError, match="write_threads"):
        WriteShards("x", write_threads=0)
    with pytest.raises(ValueError, match="compression must be one of zstd, lz4, snappy, none, got 'gzip'"):
        WriteShards("x", compression="gzip")
    with pytest.raises(ValueError, match="tfrecord shards take no compression"):
        WriteShards("x", format="tfrecord", compression="zstd")
    with pytest.raises(ValueError, match="schema"):
        WriteShards("x", schema={"a": 1})
    with pytest.raises(ValueError, match="cannot hold"):
        infer_schema(pa.schema([("m", pa.map_(pa.string(), pa.int64()))]))


@pytest.mark.parametrize(
    "shards, planted, write_threads",
    [(1, 0, 1), (3, 1, 3)],  # one after another; and one of three shards encoded at once
)
def test_a_symbolic_link_planted_under_a_shard_name_does_not_redirect_the_write(
    tmp_path, shards, planted, write_threads
):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / shard_name(planted, shards, ".parquet")).symlink_to(elsewhere / "stolen.parquet")
    _, batches = _batches(rows=60)
    with pytest.raises(Exception, match="symbolic link"):
        _run((str(out), batches, dict(num_shards=shards, seed=1, write_threads=write_threads)))
    assert list(elsewhere.iterdir()) == []


def _write_counted(out, batches, **kwargs):
    """Runs one WriteShards; returns the committed value of its `rows` counter."""
    p = beam.Pipeline(options=in_process_options())
    _ = p | beam.Create(batches) | WriteShards(out, **kwargs)
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("rows"))["counters"]
    return sum(c.committed for c in counters if c.key.metric.namespace == "sparseflow.WriteShards")


def test_shards_encoded_concurrently_are_the_shards_written_one_at_a_time(tmp_path, monkeypatch):
    _, batches = _batches(rows=300, size=29)
    options = dict(num_shards=5, schema=SCHEMA, row_group_size=16, seed=3)
    serial, threaded = str(tmp_path / "serial"), str(tmp_path / "threaded")
    assert _write_counted(serial, batches, write_threads=1, **options) == 300
    # Two writes must be under way at once to pass the barrier: one at a time, it times out.
    meet = threading.Barrier(2, timeout=30)
    threads = set()
    real_write = shard_writer.write_shard_file

    def write_meeting_another(path, *args):
        threads.add(threading.current_thread().name)
        if "part-00000" in path or "part-00001" in path:
            meet.wait()
        return real_write(path, *args)

    monkeypatch.setattr(shard_writer, "write_shard_file", write_meeting_another)
    # The counter is read from the bundle's thread: counted in the writing threads, it would read 0.
    assert _write_counted(threaded, batches, write_threads=2, **options) == 300
    assert len(threads) == 2 and all(t.startswith("sparseflow-write-shard") for t in threads)
    for i in range(5):
        name = shard_name(i, 5, ".parquet")
        assert read_parquet_shard(os.path.join(threaded, name)).equals(read_parquet_shard(os.path.join(serial, name)))


@pytest.mark.parametrize("compression, codec", [(None, "ZSTD"), ("lz4", "LZ4"), ("none", "UNCOMPRESSED")])
def test_parquet_shards_use_the_codec_asked_for(tmp_path, compression, codec):
    table, batches = _batches()
    out = str(tmp_path / "out")
    _run((out, batches, dict(num_shards=2, schema=SCHEMA, row_group_size=16, compression=compression)))
    for index in range(2):
        path = os.path.join(out, shard_name(index, 2, ".parquet"))
        meta = pq.ParquetFile(path).metadata
        assert {meta.row_group(0).column(c).compression for c in range(meta.num_columns)} == {codec}
    written = pa.concat_tables(read_parquet_shard(os.path.join(out, shard_name(i, 2, ".parquet")), SCHEMA)
                               for i in range(2))
    assert sorted(written.column("label").to_pylist()) == table.column("label").to_pylist()
