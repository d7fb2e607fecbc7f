"""The real Criteo sample through ReadLogs -> HashIds -> ComputeStats -> WriteShards."""

import collections
import json
import os

import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from oracles import capacity_max

from sparse_io import Schema, criteo_schema, read_file, read_parquet_shard, shard_name
from transforms.beam import ComputeStats, HashIds, ReadLogs, WriteShards, in_process_options

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CATS = [f"C{i}" for i in range(1, 27)]
BINS = 1 << 18


def test_real_criteo_sample_ingests_to_keras_identical_shards_and_sound_stats(criteo_data_dir, tmp_path):
    tsv = sorted(criteo_data_dir.glob("criteo_paddlerec*.tsv"))
    raw = pa.Table.from_batches([b for path in tsv for b in read_file(str(path), "criteo", criteo_schema())])
    assert raw.num_rows == 300
    hashing = HashIds(CATS, BINS)
    schema = hashing.output_schema(criteo_schema())
    out = str(tmp_path / "shards")
    with BeamPipeline(options=in_process_options()) as p:
        hashed = (
            p | ReadLogs(str(criteo_data_dir / "criteo_paddlerec*.tsv"), "criteo", batch_size=64) | hashing
        )
        hashed | ComputeStats(CATS, [32, 300], output_path=str(tmp_path / "stats.json"))
        hashed | WriteShards(out, num_shards=3, seed=0, schema=schema, stats_batch_sizes=[32, 300])
    written = pa.concat_tables(
        [read_parquet_shard(os.path.join(out, shard_name(i, 3, ".parquet"))) for i in range(3)]
    )
    assert written.num_rows == 300 and Schema.load(out) == schema
    # Each raw row is in the shards once, its ids hashed as keras.layers.Hashing hashes them.
    layer = keras.layers.Hashing(num_bins=BINS)

    def keyed(table, cats):
        rows = zip(*(table.column(c).to_pylist() for c in ["label", "I1", "I5", *cats]))
        return collections.Counter(repr(r) for r in rows)

    expected = raw.to_pydict()
    for c in CATS:
        flat = [v for row in expected[c] for v in row]
        buckets = iter(np.asarray(layer(tf.constant(flat))).tolist())
        expected[c] = [[next(buckets) for _ in row] for row in expected[c]]
    assert keyed(pa.table(expected), CATS) == keyed(written, CATS)
    # stats.json, both the standalone one and the one beside the shards, from the written ids.
    for path in (str(tmp_path / "stats.json"), os.path.join(out, "stats.json")):
        with open(path) as f:
            stats = json.load(f)
        assert stats["num_rows"] == 300
        for c in ("C1", "C9", "C20", "C26"):
            ids = [v for row in written.column(c).to_pylist() for v in row]
            lengths = np.array([len(r) for r in written.column(c).to_pylist()])
            feature = stats["features"][c]
            assert feature["distinct_ids"] == len(set(ids)) and feature["distinct_ids_exact"]
            assert feature["ids_per_row"]["max"] == lengths.max()
            assert feature["capacity"]["32"]["max"] == capacity_max(lengths.tolist(), 32)
            assert feature["capacity"]["300"] == {"max": len(ids), "p99_9": len(ids)}
            assert feature["top_ids"][0][1] == collections.Counter(ids).most_common(1)[0][1]
