"""Text logs in another encoding than UTF-8: read as that codec, undecodable lines as dead letters."""

import csv
import gzip
import io

import pytest

from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file
from sparse_io.errors import LayoutError
from sparse_io.readers import check_encoding

SCHEMA = Schema([FeatureSpec("label", "label"), FeatureSpec("city", dtype="string")])
CITIES = ["Zürich", "Besançon", "Malmö", "Reykjavík", "São Paulo", "plain"]


def _rows(path, fmt="csv", schema=SCHEMA, **kwargs):
    sink = DeadLetterSink()
    rows = [r for b in read_file(str(path), fmt, schema, dead_letters=sink, **kwargs) for r in b.to_pylist()]
    return rows, sink


def _latin1_log(path, rows):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["label", "city"])
    records = [(str(i % 2), CITIES[i % len(CITIES)]) for i in range(rows)]
    writer.writerows(records)
    data = text.getvalue().encode("latin-1")
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return [{"label": int(label), "city": [city]} for label, city in records]


@pytest.mark.parametrize("name", ["latin.csv", "latin.csv.gz"])
def test_a_latin1_file_reads_with_its_encoding(tmp_path, name):
    path = tmp_path / name
    expected = _latin1_log(path, 50)
    rows, sink = _rows(path, encoding="latin-1", batch_size=7)
    assert rows == expected and sink.bad == 0
    rows, sink = _rows(path, batch_size=7)  # read as UTF-8 instead: the accented lines are dead letters
    assert sink.bad == sum(c != "plain" for c in [r["city"][0] for r in expected])
    assert "invalid UTF-8" in sink.letters[0].reason


def test_an_undecodable_line_is_a_dead_letter_naming_the_line_and_the_byte(tmp_path):
    path = tmp_path / "x.csv"
    # 0x81 is not a cp1252 character; the lines around it keep their numbers.
    path.write_bytes(b"label,city\n1,Gen\xe8ve\n0,\x81bad\n1,ok\n0,Gen\xe8ve\n")
    rows, sink = _rows(path, encoding="cp1252", batch_size=2)
    assert rows == [{"label": 1, "city": ["Genève"]}, {"label": 1, "city": ["ok"]}, {"label": 0, "city": ["Genève"]}]
    assert sink.records == 4 and sink.bad == 1
    (letter,) = sink.letters
    assert (letter.line, letter.reason) == (3, "cannot be decoded as cp1252: byte 2 (0x81) is not valid there")


def test_an_undecodable_header_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"label,ci\x81ty\n1,a\n")
    with pytest.raises(LayoutError, match=r"x.csv: the header line cannot be decoded as cp1252"):
        _rows(path, encoding="cp1252")


def test_jsonl_takes_an_encoding_too(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes('{"label": 1, "city": ["Malmö"]}\n'.encode("latin-1"))
    rows, _ = _rows(path, "jsonl", encoding="latin-1")
    assert rows == [{"label": 1, "city": ["Malmö"]}]


@pytest.mark.parametrize("name, message", [
    ("no-such-codec", "is not a Python text codec"),
    ("base64", "is not a Python text codec"),
    ("utf-16", "does not write a line end as the byte"),
])
def test_unusable_codecs_are_refused_by_name(tmp_path, name, message):
    with pytest.raises(ValueError, match=f"encoding '{name}' {message}"):
        check_encoding(name)
    path = tmp_path / "x.csv"
    path.write_text("label,city\n1,a\n")
    with pytest.raises(ValueError, match=message):
        _rows(path, encoding=name)


def test_parquet_takes_no_encoding(tmp_path):
    with pytest.raises(ValueError, match="encoding applies to text formats, not 'parquet'"):
        _rows(tmp_path / "x.parquet", "parquet", encoding="latin-1")
