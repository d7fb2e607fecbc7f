"""Fuzzing every log reader: bad records become dead letters with a reason, good ones come through unchanged.

Records are generated with a known status and the row they stand for (tests/_fuzz_logs.py works both out
in plain Python), then written as files in varied layouts (several files, gzip/zstd, CRLF, a byte order
mark, no final newline, small blocks). Properties checked for every example:

* every bad record is a dead letter (at its file and line) with a non-empty reason, and nothing else is;
* the good records come out in order, exactly the rows expected;
* the counts add up: rows out + dead letters == records read == records written.

Each property test runs `EXAMPLES` hypothesis examples (fixed here, whatever the profile).
"""

from __future__ import annotations

import bz2
import gzip
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from _fuzz_logs import (
    CRITEO_FIELDS,
    INT64,
    TABLE_COLUMNS,
    bad_int_text,
    criteo_record,
    csv_record,
    int_text,
    json_bad_int,
    json_int,
    jsonl_record,
    line_count,
    parquet_table,
    quote,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse_io import CorruptFileError, DeadLetterSink, FeatureSpec, Schema, read_file, read_logs

EXAMPLES = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64", label_type="integer"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("ts", "dense", "int64"),
        FeatureSpec("items", "sparse", "int64", weighted=True, vocabulary_size=1000),
        FeatureSpec("cats", "sparse", "int32"),
        FeatureSpec("tags", "sparse", "string"),
    ]
)
assert SCHEMA.arrow_schema().names == TABLE_COLUMNS

_COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}

layouts = st.fixed_dictionaries(
    {
        "files": st.integers(1, 2),
        "compression": st.sampled_from(sorted(_COMPRESS)),
        "crlf": st.booleans(),
        "final_newline": st.booleans(),
        "bom": st.booleans(),
        "batch_size": st.sampled_from([1, 2, 3, 7, 64, 8192]),
        "read_file": st.booleans(),
    }
)


def _file_bytes(lines: list[bytes], layout: dict) -> bytes:
    if not lines:
        return b""
    end = b"\r\n" if layout["crlf"] else b"\n"
    data = end.join(lines)
    if layout["final_newline"] or layout["crlf"] or lines[-1] == b"":
        data += end  # (an empty last line only exists when something ends it)
    elif b"\r" in data and b"\n" not in data:
        data += end  # a carriage return inside a line ("cr"), not a file of classic Mac line ends
    return (b"\xef\xbb\xbf" if layout["bom"] else b"") + data


def _write_logs(directory, records, layout, suffix: str, header: bytes | None = None):
    """Writes the records over 1 or 2 files; returns [(path, [(record, line number)])]."""
    cut = len(records) // 2 if layout["files"] == 2 else len(records)
    parts = [records[:cut], records[cut:]] if layout["files"] == 2 else [records]
    files = []
    for i, part in enumerate(parts):
        lines = ([header] if header is not None else []) + [r.line for r in part]
        data = _file_bytes(lines, layout)
        first = 2 if header is not None else 1
        path = os.path.join(str(directory), f"part{i}{suffix}{layout['compression']}")
        with open(path, "wb") as f:
            f.write(_COMPRESS[layout["compression"]](data))
        assert line_count(data) == len(lines)
        files.append((path, [(r, first + k) for k, r in enumerate(part)]))
    return files


def _read(files, format, schema, layout, **kw):
    sink = DeadLetterSink()
    paths = [p for p, _ in files]
    if len(paths) == 1 and layout["read_file"]:
        batches = list(read_file(paths[0], format, schema, batch_size=layout["batch_size"], dead_letters=sink, **kw))
    else:
        batches = list(
            read_logs(paths, format, schema, batch_size=layout["batch_size"], errors=sink, error_budget=1.0, **kw)
        )
    target = schema.arrow_schema() if schema is not None else None
    for batch in batches:
        assert batch.num_rows <= layout["batch_size"]
        assert target is None or batch.schema.equals(target)
    return sink, [row for batch in batches for row in batch.to_pylist()]


def _check(files, sink: DeadLetterSink, rows: list[dict]):
    placed = [(path, record, line) for path, part in files for record, line in part]
    expected_rows = [record.row for _, record, _ in placed if record.row is not None]
    expected_bad = {(path, line): record for path, record, line in placed if record.row is None}
    letters = {(d.source, d.line): d for d in sink}
    wrongly_kept = sorted(set(expected_bad) - set(letters))
    wrongly_dropped = sorted(set(letters) - set(expected_bad))
    assert not wrongly_kept, [(k, expected_bad[k].note, expected_bad[k].line[:200]) for k in wrongly_kept]
    assert not wrongly_dropped, [(k, letters[k].reason, letters[k].raw[:200]) for k in wrongly_dropped]
    assert all(d.reason.strip() for d in sink)
    assert len(rows) == len(expected_rows)
    for i, (got, want) in enumerate(zip(rows, expected_rows)):
        assert got == want, (i, got, want)
    assert sink.records == len(placed)
    assert sink.bad == len(sink.letters) == len(expected_bad)
    assert len(rows) + sink.bad == sink.records  # good + bad == total


# --- Criteo TSV --------------------------------------------------------------------------------------


@st.composite
def _criteo_case(draw):
    strict = draw(st.booleans())
    return strict, draw(st.lists(criteo_record(strict), max_size=16))


@FUZZ
@given(case=_criteo_case(), layout=layouts)
def test_criteo_reader_keeps_good_lines_and_dead_letters_bad_ones(tmp_path_factory, case, layout):
    strict, records = case
    files = _write_logs(tmp_path_factory.mktemp("criteo"), records, layout, ".tsv")
    sink, rows = _read(files, "criteo", None, layout, strict=strict)
    _check(files, sink, rows)
    short_good = sum(r.row is not None and r.line.count(b"\t") < len(CRITEO_FIELDS) - 1 for r in records)
    assert sink.padded == short_good


# --- CSV / TSV ---------------------------------------------------------------------------------------


@st.composite
def _csv_case(draw):
    format, delimiter = draw(st.sampled_from([("csv", ","), ("tsv", "\t")]))
    extras = [f"extra{i}" for i in range(draw(st.integers(0, 2)))]
    columns = draw(st.permutations(TABLE_COLUMNS + extras))
    records = draw(st.lists(csv_record(columns, delimiter), max_size=16))
    return format, delimiter.join(columns).encode(), records


@FUZZ
@given(case=_csv_case(), layout=layouts)
def test_csv_reader_keeps_good_lines_and_dead_letters_bad_ones(tmp_path_factory, case, layout):
    format, header, records = case
    files = _write_logs(tmp_path_factory.mktemp("csv"), records, layout, "." + format, header=header)
    sink, rows = _read(files, format, SCHEMA, layout)
    _check(files, sink, rows)


# --- JSON Lines --------------------------------------------------------------------------------------


@FUZZ
@given(records=st.lists(jsonl_record(), max_size=16), layout=layouts)
def test_jsonl_reader_keeps_good_lines_and_dead_letters_bad_ones(tmp_path_factory, records, layout):
    files = _write_logs(tmp_path_factory.mktemp("jsonl"), records, layout, ".jsonl")
    sink, rows = _read(files, "jsonl", SCHEMA, layout)
    _check(files, sink, rows)


# --- Parquet -----------------------------------------------------------------------------------------


@FUZZ
@given(case=parquet_table(), row_group_size=st.integers(1, 8), batch_size=st.sampled_from([1, 3, 16, 8192]))
def test_parquet_reader_converts_types_it_can_and_names_columns_it_cannot(
    tmp_path_factory, case, row_group_size, batch_size
):
    table, expected, refused = case
    path = os.path.join(str(tmp_path_factory.mktemp("parquet")), "log.parquet")
    pq.write_table(table, path, row_group_size=row_group_size)
    sink = DeadLetterSink()
    if refused is not None:  # a column the feature cannot be read from: the whole file is refused
        with pytest.raises(ValueError) as caught:
            list(read_logs(path, "parquet", SCHEMA, batch_size=batch_size, errors=sink, error_budget=1.0))
        assert path in str(caught.value) and refused in str(caught.value)
        return
    batches = list(read_logs(path, "parquet", SCHEMA, batch_size=batch_size, errors=sink, error_budget=1.0))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert all(b.num_rows <= batch_size and b.schema.equals(SCHEMA.arrow_schema()) for b in batches)
    assert {d.line for d in sink} == {i + 1 for i, row in enumerate(expected) if row is None}
    assert all(d.source == path and d.reason for d in sink)
    assert rows == [row for row in expected if row is not None]
    assert len(rows) + sink.bad == sink.records == table.num_rows


# --- arbitrary bytes ---------------------------------------------------------------------------------

_junk = st.one_of(
    st.binary(max_size=400),
    st.lists(st.binary(max_size=40), max_size=12).map(b"\n".join),
    st.lists(
        st.sampled_from([b"\t", b",", b"|", b'"', b"{", b"}", b"[", b"null", b"1", b"\n", b"\r", b"\xff", b"e"]),
        max_size=60,
    ).map(b"".join),
)


@FUZZ
@given(data=_junk, format=st.sampled_from(["criteo", "csv", "tsv", "jsonl"]), batch_size=st.sampled_from([1, 5, 8192]))
def test_any_bytes_are_read_without_crashing_and_every_line_is_counted(tmp_path_factory, data, format, batch_size):
    path = os.path.join(str(tmp_path_factory.mktemp("junk")), "junk." + format)
    with open(path, "wb") as f:
        f.write(data)
    sink = DeadLetterSink()
    schema = None if format == "criteo" else SCHEMA
    try:
        batches = read_logs(path, format, schema, batch_size=batch_size, errors=sink, error_budget=1.0)
        rows = sum(b.num_rows for b in batches)
    except ValueError as e:  # only a CSV header can make the whole file unreadable
        assert format in ("csv", "tsv") and path in str(e)
        return
    header = 1 if format in ("csv", "tsv") and line_count(data) else 0
    assert sink.records == line_count(data) - header
    assert rows + sink.bad == sink.records


@FUZZ
@given(data=st.binary(max_size=300), cut=st.floats(0, 1))
def test_a_damaged_parquet_log_is_an_error_naming_the_file(tmp_path_factory, data, cut):
    directory = tmp_path_factory.mktemp("bad_parquet")
    good = os.path.join(str(directory), "good.parquet")
    pq.write_table(pa.table({f.name: pa.nulls(3, f.type) for f in SCHEMA.arrow_schema()}), good)
    with open(good, "rb") as f:
        whole = f.read()
    for name, content in (("junk.parquet", data), ("cut.parquet", whole[: int(cut * (len(whole) - 1))])):
        path = os.path.join(str(directory), name)
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(CorruptFileError, match="damaged Parquet file") as caught:
            list(read_logs(path, "parquet", SCHEMA, errors=DeadLetterSink(), error_budget=1.0))
        assert path in str(caught.value)


# --- empty and header-only files ---------------------------------------------------------------------


@pytest.mark.parametrize("format", ["criteo", "csv", "tsv", "jsonl"])
@pytest.mark.parametrize("compression", ["", ".gz", ".bz2"])
def test_an_empty_text_file_holds_no_records(tmp_path, format, compression):
    path = str(tmp_path / f"empty.{format}{compression}")
    with open(path, "wb") as f:
        f.write({"": b"", ".gz": gzip.compress(b""), ".bz2": bz2.compress(b"")}[compression])
    sink = DeadLetterSink()
    assert list(read_logs(path, format, None if format == "criteo" else SCHEMA, errors=sink)) == []
    assert sink.records == sink.bad == 0


@pytest.mark.parametrize("format, delimiter", [("csv", ","), ("tsv", "\t")])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"])
def test_a_header_only_file_holds_no_records(tmp_path, format, delimiter, ending):
    path = str(tmp_path / f"header.{format}")
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + delimiter.join(reversed(TABLE_COLUMNS)).encode() + ending)
    sink = DeadLetterSink()
    assert list(read_logs(path, format, SCHEMA, errors=sink)) == []
    assert sink.records == sink.bad == 0


def test_a_header_lacking_a_schema_column_is_an_error_naming_file_and_column(tmp_path):
    path = str(tmp_path / "short_header.csv")
    with open(path, "w") as f:
        f.write(",".join(c for c in TABLE_COLUMNS if c != "cats") + "\n1,,,,,\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['cats'\]") as caught:
        list(read_logs(path, "csv", SCHEMA))
    assert path in str(caught.value)


def test_a_parquet_log_missing_a_column_is_an_error_naming_file_and_column(tmp_path):
    path = str(tmp_path / "no_tags.parquet")
    names = [n for n in TABLE_COLUMNS if n != "tags"]
    pq.write_table(pa.table({n: pa.nulls(2, SCHEMA.arrow_schema().field(n).type) for n in names}), path)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['tags'\]") as caught:
        list(read_logs(path, "parquet", SCHEMA))
    assert path in str(caught.value)


# --- numbers beside other numbers --------------------------------------------------------------------
# A block of lines is converted column by column, so a value's fate must not depend on its neighbours
# (a float beside a big integer, a hexadecimal or out-of-range value beside plain ones).

NUMBERS = Schema([FeatureSpec("label", "label", "int64", label_type="integer"), FeatureSpec("ts", "dense", "int64")])


@FUZZ
@given(
    cells=st.lists(st.one_of(json_int(*INT64), json_int(*INT64), json_bad_int(*INT64)), min_size=1, max_size=12),
    batch_size=st.sampled_from([2, 5, 8192]),
)
def test_jsonl_integers_keep_their_exact_value_whatever_their_neighbours(tmp_path_factory, cells, batch_size):
    path = os.path.join(str(tmp_path_factory.mktemp("json_numbers")), "n.jsonl")
    with open(path, "w") as f:
        f.write("".join(f'{{"label": 1, "ts": {c.text}}}\n' for c in cells))
    sink = DeadLetterSink()
    batches = read_logs(path, "jsonl", NUMBERS, batch_size=batch_size, errors=sink, error_budget=1.0)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [r["ts"] for r in rows] == [c.value for c in cells if c.ok]
    assert [d.line for d in sink] == [i + 1 for i, c in enumerate(cells) if not c.ok]


@FUZZ
@given(
    cells=st.lists(st.one_of(int_text(*INT64), int_text(*INT64), bad_int_text(*INT64)), min_size=1, max_size=12),
    batch_size=st.sampled_from([2, 5, 8192]),
)
def test_text_integers_keep_their_exact_value_whatever_their_neighbours(tmp_path_factory, cells, batch_size):
    path = os.path.join(str(tmp_path_factory.mktemp("csv_numbers")), "n.csv")
    with open(path, "w") as f:
        f.write("label,ts\n" + "".join(f"1,{quote(c.text, ',')}\n" for c in cells))
    sink = DeadLetterSink()
    batches = read_logs(path, "csv", NUMBERS, batch_size=batch_size, errors=sink, error_budget=1.0)
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [r["ts"] for r in rows] == [c.value for c in cells if c.ok]
    assert [d.line for d in sink] == [i + 2 for i, c in enumerate(cells) if not c.ok]


def test_an_integer_weight_float32_would_round_is_a_dead_letter_in_a_parquet_log(tmp_path):
    # 2**24 + 1 is the smallest positive integer float32 cannot hold; the fuzzer above draws such
    # weights only now and then, so this pins the rule on every run.
    table = pa.table(
        {
            "label": [1, 0],
            "items": pa.array([[1], [2]], pa.list_(pa.int64())),
            "items__weights": pa.array([[2**24 + 1], [2**24]], pa.list_(pa.int64())),
        }
    )
    path = str(tmp_path / "log.parquet")
    pq.write_table(table, path)
    schema = Schema([SCHEMA["label"], SCHEMA["items"]])
    sink = DeadLetterSink()
    rows = [row for b in read_logs(path, "parquet", schema, errors=sink, error_budget=1.0) for row in b.to_pylist()]
    assert [(d.line, "16777217" in d.reason) for d in sink] == [(1, True)]
    assert rows == [{"label": 0, "items": [2], "items__weights": [16777216.0]}]
