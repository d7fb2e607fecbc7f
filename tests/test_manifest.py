"""sparse_io.manifest: a committed directory lists every file with size, CRC-32C and rows; readers check it."""

import json
import os
import subprocess
import sys

import google_crc32c
import pyarrow.parquet as pq
import pytest
from _batches import SCHEMA, to_batch

from sparse_io import iter_shards, shard_name, write_parquet_shard, write_tfrecord_shard
from sparse_io.manifest import (
    MANIFEST_FILE,
    ManifestError,
    commit_directory,
    file_checksum,
    read_manifest,
    verify_directory,
    verify_paths,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(n, base=0):
    return [{"label": base + r, "price": 1.5, "ts": r, "items": [r, r + 1], "items__weights": [1.0, 0.5],
             "cats": [r % 3], "tags": ["t"]} for r in range(n)]


def _write(directory, suffix=".parquet", counts=(3, 5)):
    write = write_parquet_shard if suffix == ".parquet" else write_tfrecord_shard
    for i, n in enumerate(counts):
        write(os.path.join(str(directory), shard_name(i, len(counts), suffix)), [to_batch(_rows(n, 100 * i))], SCHEMA)
    SCHEMA.save(str(directory))
    os.makedirs(os.path.join(str(directory), "vocab"))
    with open(os.path.join(str(directory), "vocab", "tags.txt"), "w") as f:
        f.write("t\n")


def _crc(path):
    with open(path, "rb") as f:
        return f"{google_crc32c.value(f.read()):08x}"


def test_the_checksum_is_crc32c_of_the_bytes(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"123456789")
    assert file_checksum(str(path)) == "e3069283"  # the published CRC-32C check value


@pytest.mark.parametrize("suffix", [".parquet", ".tfrecord"])
def test_commit_lists_every_file_with_size_checksum_and_shard_rows(tmp_path, suffix):
    _write(tmp_path, suffix, counts=(3, 5))
    inputs = [{"path": "log.tsv", "bytes": 10}]
    manifest = commit_directory(str(tmp_path), inputs=inputs, totals={"rows_in": 9, "bad": 1})
    on_disk = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert on_disk == manifest == read_manifest(str(tmp_path))
    shards = [shard_name(0, 2, suffix), shard_name(1, 2, suffix)]
    assert [e["path"] for e in manifest["shards"]] == shards
    assert [e["rows"] for e in manifest["shards"]] == [3, 5]
    for entry in manifest["shards"] + manifest["files"]:
        path = tmp_path / entry["path"]
        assert entry["bytes"] == os.stat(path).st_size
        assert entry["crc32c"] == _crc(path)
    assert sorted(e["path"] for e in manifest["files"]) == ["schema.json", "vocab/tags.txt"]
    assert manifest["totals"] == {"rows_in": 9, "rows_out": 8, "bad": 1}
    assert manifest["inputs"] == [{"path": "log.tsv", "bytes": 10}]
    assert manifest["checksum"] == "crc32c"
    verify_directory(str(tmp_path), "checksums")


def test_commit_refuses_a_temporary_of_an_unfinished_write_and_a_directory_without_shards(tmp_path):
    _write(tmp_path)
    (tmp_path / ".tmp-abc-part-00000-of-00002.parquet").write_bytes(b"PAR1")
    with pytest.raises(ManifestError, match="temporary of an unfinished write"):
        commit_directory(str(tmp_path))
    os.remove(tmp_path / ".tmp-abc-part-00000-of-00002.parquet")
    shard = tmp_path / shard_name(1, 2, ".parquet")
    shard.write_bytes(shard.read_bytes()[:-20])  # cut short: no footer
    with pytest.raises(ManifestError, match="part-00001-of-00002.parquet: not a readable Parquet shard"):
        commit_directory(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "schema.json").write_text("{}")
    with pytest.raises(ManifestError, match="no .parquet, .tfrecord or .arrow shard"):
        commit_directory(str(empty))


def test_a_directory_without_manifest_is_refused_by_every_reader_in_one_line(tmp_path):
    _write(tmp_path)
    with pytest.raises(ManifestError) as e:
        verify_directory(str(tmp_path))
    assert "no _MANIFEST.json" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ManifestError, match="no _MANIFEST.json"):
        list(iter_shards(str(tmp_path)))
    with pytest.raises(ManifestError, match="no _MANIFEST.json"):
        list(iter_shards([str(tmp_path / shard_name(0, 2, ".parquet"))]))
    assert sum(t.num_rows for t in iter_shards(str(tmp_path), verify="none")) == 8  # foreign shards, on request


def test_a_missing_shard_is_refused_naming_it(tmp_path):
    _write(tmp_path)
    commit_directory(str(tmp_path))
    os.remove(tmp_path / shard_name(1, 2, ".parquet"))
    with pytest.raises(ManifestError, match=r"part-00001-of-00002.parquet is missing"):
        list(iter_shards(str(tmp_path)))


def test_an_extra_file_is_refused_naming_it(tmp_path):
    _write(tmp_path)
    commit_directory(str(tmp_path))
    (tmp_path / "part-00002-of-00002.parquet").write_bytes((tmp_path / shard_name(0, 2, ".parquet")).read_bytes())
    with pytest.raises(ManifestError, match=r"part-00002-of-00002.parquet is not in the manifest"):
        verify_directory(str(tmp_path))


def test_a_changed_size_is_caught_by_sizes_and_changed_bytes_only_by_checksums(tmp_path):
    _write(tmp_path)
    commit_directory(str(tmp_path))
    vocab = tmp_path / "vocab" / "tags.txt"
    vocab.write_text("u\n")  # same size, other bytes
    verify_directory(str(tmp_path), "sizes")
    with pytest.raises(ManifestError, match=r"vocab/tags.txt has checksum"):
        verify_directory(str(tmp_path), "checksums")
    vocab.write_text("longer\n")
    with pytest.raises(ManifestError, match=r"vocab/tags.txt has 7 bytes, the manifest says 2"):
        verify_directory(str(tmp_path), "sizes")
    verify_directory(str(tmp_path), "none")
    with pytest.raises(ValueError, match="verify must be one of"):
        verify_directory(str(tmp_path), "size")


def test_named_files_are_checked_against_their_directory_manifest(tmp_path):
    _write(tmp_path)
    commit_directory(str(tmp_path))
    first = str(tmp_path / shard_name(0, 2, ".parquet"))
    verify_paths([first], "checksums")
    assert sum(t.num_rows for t in iter_shards([first])) == 3
    stray = tmp_path / "other.parquet"
    pq.write_table(pq.read_table(first), stray)
    with pytest.raises(ManifestError, match="other.parquet is not in the manifest"):
        verify_paths([str(stray)])


def test_verify_command_checks_everything_and_exits_2_on_a_difference(tmp_path):
    _write(tmp_path)
    commit_directory(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=REPO)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.verify", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    ok = run(str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "ok: 2 shards, 8 rows" in ok.stdout
    help_text = run("--help").stdout
    assert "--verify" in help_text and "default: checksums" in help_text
    vocab = tmp_path / "vocab" / "tags.txt"
    vocab.write_text("u\n")  # same size: only a checksum finds it
    (tmp_path / "notes.txt").write_text("mine")
    bad = run(str(tmp_path))
    assert bad.returncode == 2
    assert "notes.txt is not in the manifest" in bad.stderr and "vocab/tags.txt has checksum" in bad.stderr
    assert run(str(tmp_path / "nowhere")).returncode == 2
