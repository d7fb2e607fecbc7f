"""AlignedIpcSink: Arrow IPC files whose record-batch buffers lie at multiples of 64 bytes, read by any reader."""

import io
import random

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from tfdata_data import SCHEMA, random_rows, to_table

from sparse_io.arrow_shards import ARROW_CODECS, write_arrow_shard
from sparse_io.ipc_alignment import AlignedIpcSink


def _batches():
    ids = pa.array([[1, 2, 3], [], None, [7]], pa.list_(pa.int64()))
    words = pa.array(["x", "y", "z"])

    def coded(indices):  # one dictionary for the file, as its format requires
        return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), words)

    return [
        pa.record_batch({"ids": ids, "w": pa.array([0.5, None, 2.0, 1.0]), "s": pa.array(["a", "bb", None, "ccc"]),
                         "d": coded([0, 1, 0, None]), "b": pa.array([True, False, None, True])}),
        pa.record_batch({"ids": ids.slice(1, 3), "w": pa.array([1.0, 2.0, 3.0]), "s": pa.array(["", "d", "e"]),
                         "d": coded([1, 1, 2]), "b": pa.array([False] * 3)}),
    ]


def _plain_file(batches, compression=None) -> bytes:
    raw = io.BytesIO()
    with ipc.new_file(raw, batches[0].schema, options=ipc.IpcWriteOptions(compression=compression)) as writer:
        for i, batch in enumerate(batches):
            writer.write_batch(batch, custom_metadata={b"i": str(i).encode()})
    return raw.getvalue()


def _through_sink(data: bytes, chunks) -> bytes:
    raw = io.BytesIO()
    sink = AlignedIpcSink(raw)
    at = 0
    for size in chunks:
        sink.write(data[at:at + size])
        at += size
    sink.write(data[at:])
    sink.close()
    return raw.getvalue()


def _message_body_offsets(data: bytes) -> list[int]:
    """File offsets of every message body, as pyarrow's own message reader finds them."""
    base = pa.py_buffer(data)
    reader = ipc.MessageReader.open_stream(pa.BufferReader(base.slice(8)))
    offsets = []
    for message in reader:
        if message.body is not None and message.body.size:
            offsets.append(message.body.address - base.address)
    return offsets


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_the_file_reads_back_equal_with_every_body_at_a_multiple_of_64(compression):
    batches = _batches()
    data = _through_sink(_plain_file(batches, compression), [])
    reader = ipc.open_file(pa.py_buffer(data))
    assert reader.num_record_batches == 2
    for i, batch in enumerate(batches):
        got = reader.get_batch_with_custom_metadata(i)
        got.batch.validate(full=True)
        assert got.batch.equals(batch) and got.custom_metadata == {b"i": str(i).encode()}
    assert ipc.open_stream(pa.py_buffer(data[8:])).read_all().equals(pa.Table.from_batches(batches))
    offsets = _message_body_offsets(data)
    assert len(offsets) >= 2 and all(o % 64 == 0 for o in offsets)


def test_uncompressed_buffers_start_at_multiples_of_64_in_the_file():
    data = _through_sink(_plain_file(_batches()), [])
    base = pa.py_buffer(data)
    reader = ipc.open_file(base)
    seen = 0
    for i in range(reader.num_record_batches):
        for column in reader.get_batch(i).columns:
            for array in (column, *([column.values] if pa.types.is_list(column.type) else [])):
                for buffer in array.buffers():
                    if buffer is not None and buffer.size:
                        assert (buffer.address - base.address) % 64 == 0
                        seen += 1
    assert seen > 10
    # pyarrow's writer alone does not align them: the check above can fail.
    plain = pa.py_buffer(_plain_file(_batches()))
    first = ipc.open_file(plain).get_batch(0)
    assert any((b.address - plain.address) % 64 for c in first.columns for b in c.buffers() if b is not None and b.size)


def test_the_stream_may_arrive_in_pieces_of_any_size():
    data = _plain_file(_batches(), "zstd")
    whole = _through_sink(data, [])
    rng = random.Random(3)
    for _ in range(20):
        chunks = [rng.randint(1, 40) for _ in range(rng.randint(1, 60))]
        assert _through_sink(data, chunks) == whole
    assert _through_sink(data, [1] * len(data)) == whole


@pytest.mark.parametrize("codec", ARROW_CODECS)
def test_arrow_shards_have_aligned_record_batch_bodies(tmp_path, codec):
    path = str(tmp_path / "part-00000-of-00001.arrow")
    write_arrow_shard(path, [to_table(random_rows(300, seed=1))], SCHEMA, record_batch_size=64, compression=codec)
    data = open(path, "rb").read()
    offsets = _message_body_offsets(data)
    assert len(offsets) == 5 and all(o % 64 == 0 for o in offsets)
    if codec == "none":
        with pa.memory_map(path) as source:
            reader = ipc.open_file(source)
            batch = reader.get_batch(1)
            buffers = [b for c in batch.columns for b in c.buffers() if b is not None and b.size]
            buffers += [b for b in batch.column("items").values.buffers() if b is not None and b.size]
            # Mapped from a page boundary: an address is aligned where the file offset is.
            assert len(buffers) > 4 and all(b.address % 64 == 0 for b in buffers)


def test_what_is_not_an_ipc_file_as_pyarrow_writes_it_is_refused():
    with pytest.raises(ValueError, match="does not start with ARROW1"):
        AlignedIpcSink(io.BytesIO()).write(b"PAR1\x00\x00\x00\x00")
    legacy = io.BytesIO()
    batch = _batches()[0]
    with ipc.new_file(legacy, batch.schema, options=ipc.IpcWriteOptions(use_legacy_format=True)) as writer:
        writer.write_batch(batch)
    with pytest.raises(ValueError, match="continuation marker"):
        _through_sink(legacy.getvalue(), [])
    cut = _plain_file(_batches())
    sink = AlignedIpcSink(io.BytesIO())
    sink.write(cut[: len(cut) // 2])
    with pytest.raises(ValueError, match="ended before its footer"):
        sink.close()
