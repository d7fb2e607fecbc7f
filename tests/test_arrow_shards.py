"""Arrow IPC shards: written in record batches of a fixed size, read back exactly, refused when damaged."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from tfdata_data import SCHEMA, random_rows, to_table

from sparse_io import CorruptFileError, ManifestError, commit_directory, iter_shards, shard_name, verify_directory
from sparse_io.arrow_shards import ARROW_CODECS, ArrowShard, read_arrow_shard, write_arrow_shard

ROWS = random_rows(250, seed=4)


def _shard(tmp_path, codec="none", rows=ROWS, record_batch_size=64, parts=(0, 37, 180)) -> str:
    path = str(tmp_path / shard_name(0, 1, ".arrow"))
    table = to_table(rows)
    bounds = [*parts, len(rows)]
    pieces = [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
    assert write_arrow_shard(path, pieces, SCHEMA, record_batch_size=record_batch_size, compression=codec) == len(
        rows
    )
    return path


@pytest.mark.parametrize("codec", ARROW_CODECS)
def test_a_shard_reads_back_equal_in_record_batches_of_the_size_asked(tmp_path, codec):
    path = _shard(tmp_path, codec)
    assert read_arrow_shard(path, SCHEMA).equals(to_table(ROWS))
    with ArrowShard(path) as shard:
        assert shard.unit_rows == [64, 64, 64, 58]
        assert shard.schema_arrow == SCHEMA.arrow_schema()
        unit = shard.read_unit(2, ["items", "label"])
        assert unit.column_names == ["items", "label"]
        assert unit.to_pylist() == to_table(ROWS).slice(128, 64).select(["items", "label"]).to_pylist()


def test_uncompressed_buffers_are_views_of_the_mapped_file(tmp_path):
    path = _shard(tmp_path)
    with ArrowShard(path) as shard:
        values = shard.read_unit(1, ["items"]).column(0).chunk(0).values
    mapped = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
    buffer = values.buffers()[1]
    # The bytes sit in the file; a view of a memory map has no allocation of its own, so reading
    # the buffer after the shard is closed still sees the file's bytes.
    assert bytes(buffer) in mapped.tobytes()
    assert not buffer.is_mutable


def test_no_batches_and_an_empty_table_write_a_readable_empty_shard(tmp_path):
    path = str(tmp_path / "part-00000-of-00001.arrow")
    assert write_arrow_shard(path, [], SCHEMA) == 0
    assert read_arrow_shard(path, SCHEMA).num_rows == 0
    assert write_arrow_shard(path, [to_table([])], SCHEMA) == 0
    with ArrowShard(path) as shard:
        assert shard.unit_rows == []


def test_bad_arguments_are_refused_naming_them(tmp_path):
    path = str(tmp_path / "x.arrow")
    with pytest.raises(ValueError, match="record_batch_size must be a positive integer"):
        write_arrow_shard(path, [], SCHEMA, record_batch_size=0)
    with pytest.raises(ValueError, match="arrow compression must be one of none, lz4, zstd, got 'snappy'"):
        write_arrow_shard(path, [], SCHEMA, compression="snappy")
    assert not os.path.exists(path)


@pytest.mark.parametrize("keep", [0, 5, 400, -200, -12, -1])
def test_a_truncated_shard_is_refused_naming_the_file(tmp_path, keep):
    path = _shard(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:keep] if keep > 0 else data[:keep] if keep < 0 else b"")
    with pytest.raises(CorruptFileError, match="part-00000-of-00001.arrow: damaged Arrow file"):
        read_arrow_shard(path, SCHEMA)


def _body_offset(path: str, value: int) -> int:
    """Where the int64 `value` (an id of the shard) lies in the file."""
    data = open(path, "rb").read()
    at = data.find(np.int64(value).tobytes())
    assert at > 0
    return at


def test_an_altered_id_is_refused_by_the_record_batch_checksum(tmp_path):
    path = _shard(tmp_path)
    target = ROWS[100]["items"][0] if ROWS[100]["items"] else ROWS[100]["user"][0]
    at = _body_offset(path, target)
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0x01
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptFileError, match=r"record batch \d: checksum [0-9a-f]{8} differs from the stored"):
        read_arrow_shard(path, SCHEMA)


def test_flipping_any_byte_never_reads_a_wrong_value_silently(tmp_path):
    path = _shard(tmp_path, rows=ROWS[:80], record_batch_size=32)
    clean = open(path, "rb").read()
    expected = to_table(ROWS[:80])
    rng = np.random.default_rng(0)
    refused = 0
    for at in rng.choice(len(clean), size=120, replace=False):
        data = bytearray(clean)
        data[at] ^= 0xFF
        open(path, "wb").write(bytes(data))
        try:
            table = read_arrow_shard(path, SCHEMA)
        except (CorruptFileError, ValueError):
            refused += 1
            continue
        # A flip in padding or in metadata that does not change the data reads the same rows.
        assert table.equals(expected), f"byte {at} changed the data without an error"
    assert refused > 0


def test_a_file_of_record_batches_without_checksums_is_refused(tmp_path):
    path = str(tmp_path / "plain.arrow")
    table = to_table(ROWS[:10])
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(CorruptFileError, match="record batch 0 carries no checksum"):
        read_arrow_shard(path, SCHEMA)


def test_a_column_of_another_type_or_missing_is_a_value_error(tmp_path):
    path = _shard(tmp_path)
    other = SCHEMA.replace("user", dtype="int32")
    with pytest.raises(ValueError, match="column 'user' has type"):
        read_arrow_shard(path, other)


def test_the_manifest_counts_arrow_rows_and_catches_truncation_and_changed_bytes(tmp_path):
    directory = tmp_path / "out"
    directory.mkdir()
    paths = []
    for k in range(2):
        path = str(directory / shard_name(k, 2, ".arrow"))
        write_arrow_shard(path, [to_table(ROWS[k * 125 : (k + 1) * 125])], SCHEMA, record_batch_size=50)
        paths.append(path)
    SCHEMA.save(str(directory))
    manifest = commit_directory(str(directory))
    assert [e["rows"] for e in manifest["shards"]] == [125, 125]
    assert sum(t.num_rows for t in iter_shards(str(directory))) == len(ROWS)
    data = open(paths[1], "rb").read()
    open(paths[1], "wb").write(data[:-1] + bytes([data[-1] ^ 1]))
    verify_directory(str(directory), "sizes")  # same size: only the checksums tell
    with pytest.raises(ManifestError, match="part-00001-of-00002.arrow"):
        verify_directory(str(directory), "checksums")
    open(paths[1], "wb").write(data[:-30])
    with pytest.raises(ManifestError, match="part-00001-of-00002.arrow"):
        verify_directory(str(directory), "sizes")


def test_make_dataset_refuses_a_truncated_arrow_shard_before_reading(tmp_path):
    from transforms import make_dataset

    directory = tmp_path / "out"
    directory.mkdir()
    path = str(directory / shard_name(0, 1, ".arrow"))
    write_arrow_shard(path, [to_table(ROWS)], SCHEMA, record_batch_size=50)
    SCHEMA.save(str(directory))
    commit_directory(str(directory))
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(ManifestError, match="part-00000-of-00001.arrow"):
        make_dataset(str(directory), 16)
    with pytest.raises(CorruptFileError, match="damaged Arrow file"):
        make_dataset(str(directory), 16, verify="none")


def test_an_arrow_table_of_the_schema_is_written_as_is(tmp_path):
    table = to_table(ROWS[:5])
    assert isinstance(table, pa.Table)
    path = str(tmp_path / "a.arrow")
    write_arrow_shard(path, [table.to_batches()[0]], SCHEMA)
    assert read_arrow_shard(path).equals(table)
