"""The one-pass Criteo parser: it takes exactly the blocks of good records, and agrees with the general parser."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import DeadLetterSink, criteo_schema, read_file
from sparse_io.readers._source import split_lines
from sparse_io.readers.criteo import parse_criteo_block, parse_criteo_bytes

SCHEMA = criteo_schema()
NO_LABEL = criteo_schema(label=False)


def _line(label="1", ints=None, cats=None, schema=SCHEMA) -> str:
    ints = ints if ints is not None else [str(i * 7) for i in range(13)]
    cats = cats if cats is not None else [f"{(i * 2654435761) & 0xFFFFFFFF:08x}" for i in range(26)]
    return "\t".join(([label] if schema is SCHEMA else []) + [*ints, *cats])


def _general(data: bytes, schema=SCHEMA):
    batch, problems = parse_criteo_block(split_lines(data).cast("string"), schema, strict=False)
    return batch, problems


def test_a_block_of_good_records_takes_the_fast_path_and_matches_the_general_one():
    rng = np.random.default_rng(0)
    lines = []
    for r in range(300):
        ints = ["" if rng.random() < 0.2 else str(int(rng.integers(-5, 10**6))) for _ in range(13)]
        ints[3] = "" if r % 3 else "2.5e3"
        cats = ["" if rng.random() < 0.15 else f"{int(rng.integers(2**32)):08x}" for _ in range(26)]
        lines.append(_line(str(r % 2), ints, cats))
    data = ("\n".join(lines) + "\n").encode()
    fast = parse_criteo_bytes(data, SCHEMA)
    assert fast is not None
    general, problems = _general(data)
    assert not problems.bad.any()
    assert fast.equals(general)
    assert parse_criteo_bytes(data.rstrip(b"\n"), SCHEMA).equals(general)  # a last line without "\n"


@pytest.mark.parametrize(
    "bad_line",
    [
        _line().rsplit("\t", 2)[0],  # short: padded by the general path, or a dead letter in strict mode
        _line() + "\tdeadbeef",  # a field too many
        "",  # a blank line
        "\t" * 39,  # a line of tabs alone is blank too
        _line() + "\r",  # a carriage return
        _line(ints=[" 5"] + ["1"] * 12),  # spaces: the CSV reader would trim them
        _line(ints=["0x1F"] + ["1"] * 12),  # hexadecimal integers are not decimal text
        _line(ints=["nan"] + ["1"] * 12),  # not a finite number
        _line(ints=["1e39"] + ["1"] * 12),  # out of float32 range
        _line(label=""),  # a missing label
        _line(label="1.5"),  # not an integer label
        _line(cats=["zzzzzzzz"] + ["0000abcd"] * 25),  # not hex
        _line(cats=["abc"] + ["0000abcd"] * 25),  # not 8 digits
    ],
)
def test_a_block_with_anything_the_general_path_handles_specially_is_declined(bad_line):
    good = _line()
    data = f"{good}\n{bad_line}\n{good}\n".encode()
    assert parse_criteo_bytes(data, SCHEMA) is None


def test_invalid_utf8_and_empty_blocks_are_declined():
    good = _line().encode()
    assert parse_criteo_bytes(good + b"\n" + good.replace(b"0000", b"\xff\xfe00", 1) + b"\n", SCHEMA) is None
    # The parse skips UTF-8 validation (ids are checked as hex or numbers): a bad byte in any field declines.
    for i in range(39):
        fields = _line().encode().split(b"\t")
        fields[i] = fields[i][:-1] + b"\xe9"
        assert parse_criteo_bytes(good + b"\n" + b"\t".join(fields) + b"\n", SCHEMA) is None, i
    assert parse_criteo_bytes(b"", SCHEMA) is None
    assert parse_criteo_bytes(b"\n" + good, SCHEMA) is None


def test_a_line_of_tabs_is_blank_without_a_label_column_too():
    data = (_line(schema=NO_LABEL) + "\n" + "\t" * 38 + "\n").encode()
    assert parse_criteo_bytes(data, NO_LABEL) is None
    assert parse_criteo_bytes((_line(schema=NO_LABEL) + "\n").encode(), NO_LABEL) is not None


_field = st.one_of(
    st.sampled_from(["", "0", "17", "-3", "2.5", "1e5", "deadbeef", "0000abcd", "nan", "0x10", " 1", "ffffffff"]),
    st.text(alphabet="0123456789abcdefx.-+ e", max_size=9),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_field, min_size=38, max_size=41), min_size=1, max_size=6))
def test_whenever_the_fast_path_answers_it_equals_the_general_path(rows):
    data = "".join("\t".join(fields) + "\n" for fields in rows).encode()
    fast = parse_criteo_bytes(data, SCHEMA)
    general, problems = _general(data)
    if fast is not None:
        assert not problems.bad.any() and (problems.padded is None or not problems.padded.any())
        assert fast.equals(general)


def test_read_file_gives_the_same_rows_and_counts_with_and_without_the_fast_path(tmp_path, monkeypatch):
    lines = [_line(str(i % 2)) for i in range(50)]
    lines[30] = _line(cats=["nothex!!"] + ["0000abcd"] * 25)  # one bad record: its block goes the general way
    path = tmp_path / "log.tsv"
    path.write_text("\n".join(lines) + "\n")

    def read():
        sink = DeadLetterSink()
        batches = list(read_file(str(path), "criteo", SCHEMA, batch_size=16, dead_letters=sink))
        return batches, (sink.records, sink.bad, [d.line for d in sink])

    import sparse_io.readers as readers

    taken = []

    def counting(data, schema):
        batch = parse_criteo_bytes(data, schema)
        taken.append(batch is not None)
        return batch

    monkeypatch.setattr(readers, "parse_criteo_bytes", counting)
    fast_batches, fast_counts = read()
    assert taken == [True, False, True, True]  # blocks of 16 lines: the bad record is in the second
    monkeypatch.setattr(readers, "parse_criteo_bytes", lambda data, schema: None)
    general_batches, general_counts = read()
    assert fast_counts == general_counts == (50, 1, [31])
    assert len(fast_batches) == len(general_batches) == 4
    for a, b in zip(fast_batches, general_batches):
        assert a.equals(b)


@pytest.mark.parametrize("where", ["middle", "end"])
def test_a_blank_line_is_declined_even_with_one_column(where):
    from sparse_io import FeatureSpec, Schema

    one = Schema([FeatureSpec("C1", "sparse", "string")])
    blank_in = {"middle": b"0000abcd\n\n0000abcd\n", "end": b"0000abcd\n0000abcd\n\n"}[where]
    assert parse_criteo_bytes(b"0000abcd\n0000abcd\n", one) is not None
    assert parse_criteo_bytes(blank_in, one) is None
    full = (_line() + "\n").encode()
    assert parse_criteo_bytes(full + b"\n" + full if where == "middle" else full + b"\n", SCHEMA) is None
