"""Finding, opening and cutting input files: patterns, compression, blocks of lines."""

import bz2
import gzip
import io
import os

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from sparse_io.readers._source import compression_of, expand_paths, iter_byte_blocks, open_binary, split_lines


def _touch(tmp_path, name, data=b""):
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


class _Trickle(io.RawIOBase):
    """A stream that returns at most `step` bytes per read, like a slow network file."""

    def __init__(self, data: bytes, step: int):
        self._data, self._pos, self._step = data, 0, step

    def readable(self):
        return True

    def read(self, n=-1):
        n = self._step if n < 0 else min(n, self._step)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    st.booleans(),
    st.integers(1, 7),
    st.integers(1, 9),
)
def test_blocks_hold_every_line_once_with_its_number(lines, final_newline, per_block, step):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    if not lines:
        data = b""
    got, numbers = [], []
    # Small reads exercise lines that straddle chunks.
    blocks = list(iter_byte_blocks(_Trickle(data, step), per_block, chunk_bytes=step))
    for i, (first, block) in enumerate(blocks):
        lines_of_block = split_lines(block)
        assert 1 <= len(lines_of_block) <= per_block
        assert block.endswith(b"\n") or i == len(blocks) - 1  # only the last block may lack it
        numbers.append(first)
        got.extend(lines_of_block.to_pylist())
    # A byte-order mark at the very start of a file is not part of its first line.
    text = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    expected = text.split(b"\n")
    if text.endswith(b"\n"):
        expected = expected[:-1]
    if not text:
        expected = []
    assert got == expected
    assert numbers == list(range(1, len(expected) + 1, per_block))


def test_compression_follows_the_extension(tmp_path):
    payload = b"a\tb\nc\td\n"
    files = {
        "x.tsv": payload,
        "x.tsv.gz": gzip.compress(payload),
        "x.tsv.bz2": bz2.compress(payload),
        "x.tsv.zst": zstandard.ZstdCompressor().compress(payload[:4])
        + zstandard.ZstdCompressor().compress(payload[4:]),
    }
    for name, data in files.items():
        with open_binary(_touch(tmp_path, name, data)) as f:
            assert f.read() == payload, name
    assert [compression_of(n) for n in ("a.GZ", "a.zstd", "a.bz2", "a.csv")] == ["gzip", "zstd", "bz2", None]


def test_patterns_globs_directories_and_lists(tmp_path):
    for name in ("b.tsv", "a.tsv", "c.csv", ".hidden.tsv", "_SUCCESS"):
        _touch(tmp_path, name)
    d = str(tmp_path)
    assert expand_paths(os.path.join(d, "*.tsv")) == [os.path.join(d, "a.tsv"), os.path.join(d, "b.tsv")]
    assert expand_paths(d) == [os.path.join(d, n) for n in ("a.tsv", "b.tsv", "c.csv")]
    both = expand_paths([os.path.join(d, "c.csv"), os.path.join(d, "*.tsv"), os.path.join(d, "c.csv")])
    assert both == [os.path.join(d, n) for n in ("c.csv", "a.tsv", "b.tsv")]
    with pytest.raises(FileNotFoundError, match="no input file matches"):
        expand_paths(os.path.join(d, "*.parquet"))


@pytest.mark.parametrize("step", [1, 2, 64])
def test_a_utf8_byte_order_mark_is_dropped(step):
    data = b"\xef\xbb\xbfa,b\n\xef\xbb\xbfc\n"
    lines = [
        x
        for _, block in iter_byte_blocks(_Trickle(data, step), 10, chunk_bytes=step)
        for x in split_lines(block).to_pylist()
    ]
    assert lines == [b"a,b", b"\xef\xbb\xbfc"]  # only at the start of the file


# --- compressed streams are read to their end marker -------------------------------------------

_LOG = b"".join(b"%d\tid%05d\n" % (i % 2, i) for i in range(3000))


def _compressed(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    if kind == "bz2":
        return bz2.compress(data)
    half = len(data) // 2  # two frames: the check must follow a stream across frame boundaries
    return zstandard.ZstdCompressor().compress(data[:half]) + zstandard.ZstdCompressor().compress(data[half:])


def _read_all(path: str) -> bytes:
    with open_binary(path) as f:
        return b"".join(iter(lambda: f.read(4096), b""))


@pytest.mark.parametrize("kind", ["gz", "bz2", "zst"])
@pytest.mark.parametrize("keep", [0.15, 0.6, 0.999])
def test_a_truncated_stream_is_an_error_naming_the_file(tmp_path, kind, keep):
    from sparse_io.errors import CorruptFileError

    whole = _compressed(kind, _LOG)
    path = _touch(tmp_path, f"log.tsv.{kind}", whole[: int(len(whole) * keep)])
    assert _read_all(_touch(tmp_path, f"whole.tsv.{kind}", whole)) == _LOG  # the intact stream reads back
    with pytest.raises(CorruptFileError, match="truncated") as caught:
        _read_all(path)
    assert caught.value.path == path
    assert str(caught.value).startswith(path)


@pytest.mark.parametrize("kind", ["gz", "bz2", "zst"])
def test_a_damaged_stream_is_an_error_naming_the_file(tmp_path, kind):
    from sparse_io.errors import CorruptFileError

    whole = bytearray(
        _compressed(kind, _LOG) if kind != "zst" else zstandard.ZstdCompressor(write_checksum=True).compress(_LOG)
    )
    middle = len(whole) // 2
    whole[middle : middle + 8] = bytes(b ^ 0x5A for b in whole[middle : middle + 8])
    path = _touch(tmp_path, f"log.tsv.{kind}", bytes(whole))
    with pytest.raises(CorruptFileError) as caught:
        _read_all(path)
    assert caught.value.path == path


def test_zstd_skippable_frames_and_an_empty_file_are_complete(tmp_path):
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    data = skippable + _compressed("zst", _LOG) + skippable
    assert _read_all(_touch(tmp_path, "a.tsv.zst", data)) == _LOG
    assert _read_all(_touch(tmp_path, "empty.tsv.zst", b"")) == b""


def test_read_logs_fails_on_a_cut_zstd_log_instead_of_reading_it_short(tmp_path):
    from sparse_io import DeadLetterSink, read_logs
    from sparse_io.errors import CorruptFileError

    lines = [b"\t".join([b"1", *[b"%d" % i] * 13, *[b"%08x" % (i * 7919 % 2**32)] * 26]) for i in range(2000)]
    whole = zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n")
    path = _touch(tmp_path, "day.tsv.zst", whole[: int(len(whole) * 0.15)])
    sink = DeadLetterSink()
    with pytest.raises(CorruptFileError, match="truncated zstd stream"):
        sum(b.num_rows for b in read_logs(path, "criteo", errors=sink, error_budget=0.5))


# --- lines longer than max_line_bytes are read past, not held ----------------------------------


@given(
    st.lists(st.integers(0, 40), max_size=25),
    st.booleans(),
    st.integers(1, 6),
    st.integers(1, 17),
    st.integers(1, 12),
)
def test_a_line_longer_than_the_limit_becomes_a_marker_in_its_place(lengths, final_newline, per_block, step, limit):
    from sparse_io.readers._line_limit import LongLine

    lines = [bytes([97 + i % 26]) * n for i, n in enumerate(lengths)]
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    if not lines:
        data = b""
    expected = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        expected = expected[:-1]
    got = []
    for item in iter_byte_blocks(_Trickle(data, step), per_block, chunk_bytes=step, max_line_bytes=limit):
        if isinstance(item, LongLine):
            got.append(("long", item.line, item.length, item.head))
            assert item.limit == limit and f"{item.length:,} bytes" in item.reason
            continue
        first, block = item
        block_lines = split_lines(block).to_pylist()
        assert 1 <= len(block_lines) <= per_block
        got.extend(("line", first + i, len(x), x) for i, x in enumerate(block_lines))
    want = [
        ("long", n, len(x), x[:1024]) if len(x) > limit else ("line", n, len(x), x)
        for n, x in enumerate(expected, start=1)
    ]
    assert got == want


def test_a_long_line_between_short_ones_comes_as_its_number_length_and_head():
    from sparse_io.readers._line_limit import LongLine

    huge = b"x" * (3 << 20)
    data = b"a\n" + huge + b"\nb\n"
    items = list(iter_byte_blocks(_Trickle(data, 1 << 16), 10, chunk_bytes=1 << 16, max_line_bytes=1 << 17))
    assert [type(i).__name__ for i in items] == ["tuple", "LongLine", "tuple"]
    long = items[1]
    assert isinstance(long, LongLine) and long.line == 2 and long.length == len(huge) and long.head == huge[:1024]
    assert items[2] == (3, b"b\n")
