"""The ingest's commit assembles `_MANIFEST.json` from what the writers recorded: it reads no shard back."""

import builtins
import io
import os

import pytest

import pipelines.ingest as ingest_module
import sparse_io.manifest_entries as entries_module
from sparse_io.manifest import MANIFEST_FILE, ManifestError, build_manifest, commit_directory, read_manifest
from sparse_io.write_records import WRITE_RECORDS_FILE
from transforms.testing import ingest_in_memory

CONFIG = {"input": {"format": "criteo"}, "features": {"C1": {"vocabulary": {"min_frequency": 1}},
                                                      "C*": {"hash_buckets": 1000}},
          "output": {"num_shards": 3}}


def _lines(n):
    return ["\t".join([str(i % 2)] + [str(i % 97)] * 13 + [f"{(i * 7919) % 5003:08x}"] * 26) for i in range(n)]


def _traced_commit(monkeypatch):
    """Wraps the ingest's commit: the paths it opens for reading, the entries it describes by reading, rchar read."""
    seen = {"opened": [], "described": [], "rchar": None}
    real_commit, real_describe, real_open = ingest_module.commit_directory, entries_module.describe, builtins.open

    def describe(directory, relative):
        seen["described"].append(relative)
        return real_describe(directory, relative)

    def opened(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and "r" in mode and "+" not in mode:
            seen["opened"].append(os.fspath(file))
        return real_open(file, mode, *args, **kwargs)

    def commit(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(entries_module, "describe", describe)
            m.setattr(builtins, "open", opened)
            m.setattr(io, "open", opened)
            before = _rchar()
            try:
                return real_commit(*args, **kwargs)
            finally:
                seen["rchar"] = _rchar() - before

    monkeypatch.setattr(ingest_module, "commit_directory", commit)
    return seen


def _rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "arrow"])
def test_the_commit_reads_no_shard_and_its_manifest_equals_one_made_by_reading_every_file(tmp_path, monkeypatch, fmt):
    seen = _traced_commit(monkeypatch)
    out = str(tmp_path / "out")
    ingest_in_memory(_lines(3000), {**CONFIG, "output": {**CONFIG["output"], "format": fmt}}, output_dir=out)
    manifest = read_manifest(out)
    shards = [e["path"] for e in manifest["shards"]]
    assert len(shards) == 3 and sum(e["rows"] for e in manifest["shards"]) == 3000
    assert not [p for p in seen["opened"] if os.path.basename(p) in shards], seen["opened"]
    assert not set(seen["described"]) & set(shards) and "schema.json" not in seen["described"]
    assert WRITE_RECORDS_FILE not in os.listdir(out)
    # Computed independently: every file read and checksummed again (build_manifest without records).
    by_reading = build_manifest(out, [e["path"] for e in manifest["shards"] + manifest["files"]])
    for key in ("shards", "files"):
        assert manifest[key] == by_reading[key]
    if os.path.exists("/proc/self/io"):
        shard_bytes = sum(e["bytes"] for e in manifest["shards"])
        assert seen["rchar"] <= 0.3 * shard_bytes, (seen["rchar"], shard_bytes)


def _write_shards(out, batches_rows=(7, 5)):
    import apache_beam as beam
    import pyarrow as pa

    from sparse_io import FeatureSpec, Schema
    from transforms.beam import WriteShards, in_process_options

    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items", "sparse", "int64")])
    batches = [pa.RecordBatch.from_pylist([{"label": r, "items": [r]} for r in range(n)], schema=schema.arrow_schema())
               for n in batches_rows]
    with beam.Pipeline(options=in_process_options()) as p:
        _ = p | beam.Create(batches) | WriteShards(out, schema=schema, num_shards=2, shuffle=False)


def test_commit_directory_uses_the_records_write_shards_left_and_refuses_a_shard_changed_since(tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    _write_shards(out)
    described = []
    real = entries_module.describe
    monkeypatch.setattr(entries_module, "describe", lambda d, r: described.append(r) or real(d, r))
    manifest = commit_directory(out)
    assert described == []  # the shards, schema.json and stats.json: the writer recorded them all
    assert WRITE_RECORDS_FILE not in os.listdir(out) and sum(e["rows"] for e in manifest["shards"]) == 12
    monkeypatch.undo()
    assert manifest["shards"] == build_manifest(out, [e["path"] for e in manifest["shards"]])["shards"]

    # A shard whose size changed after it was written is refused rather than committed with a stale record.
    again = str(tmp_path / "again")
    _write_shards(again)
    shard = os.path.join(again, manifest["shards"][0]["path"])
    with open(shard, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ManifestError, match=r"part-00000-of-00002\.parquet: has \d+ bytes, its writer recorded"):
        commit_directory(again)
    assert not os.path.exists(os.path.join(again, MANIFEST_FILE))


def test_convert_commits_from_what_it_wrote_without_reading_the_destination_back(tmp_path, monkeypatch):
    from pipelines.convert import convert_output

    source = str(tmp_path / "parquet")
    _write_shards(source)
    commit_directory(source)
    described = []
    real = entries_module.describe
    monkeypatch.setattr(entries_module, "describe", lambda d, r: described.append((d, r)) or real(d, r))
    destination = str(tmp_path / "tfrecord")
    manifest = convert_output(source, destination, "tfrecord")
    assert not [r for d, r in described if d == destination], described
    monkeypatch.undo()
    listed = [e["path"] for e in manifest["shards"] + manifest["files"]]
    assert sorted(listed) == sorted(n for n in os.listdir(destination) if n != MANIFEST_FILE)
    by_reading = build_manifest(destination, listed)
    assert manifest["shards"] == by_reading["shards"] and manifest["files"] == by_reading["files"]
    assert sum(e["rows"] for e in manifest["shards"]) == 12
