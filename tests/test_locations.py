"""One rule for local paths and URLs (sparse_io.locations), and one spelling of the output's file names
(sparse_io.output_files): product code spells neither anywhere else."""

import ast
import pathlib

import pytest

from sparse_io import locations, output_files

REPO = pathlib.Path(__file__).resolve().parents[1]
PRODUCT = ("sparse_io", "pipelines", "transforms", "ops")


@pytest.mark.parametrize("path, remote", [
    ("gs://bucket/out", True), ("s3://b/k", True), ("hdfs://nn/x", True), ("file:///tmp/x", True),
    ("/tmp/out", False), ("out/train", False), ("C:\\out", False), ("C:/out", False), ("weird:name", False),
    ("./gs://x", False),
])
def test_a_path_is_a_url_only_when_it_starts_with_a_scheme_and_two_slashes(path, remote):
    assert locations.is_remote(path) is remote


def test_join_puts_a_relative_path_under_a_directory_on_either_side(tmp_path):
    assert locations.join("gs://b/out/", "vocab/C1.txt") == "gs://b/out/vocab/C1.txt"
    assert locations.join(str(tmp_path), "vocab/C1.txt") == str(tmp_path / "vocab" / "C1.txt")


def test_open_binary_and_exists_read_local_files(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"x\n")
    with locations.open_binary(str(tmp_path / "a.txt")) as f:
        assert f.read() == b"x\n"
    assert locations.exists(str(tmp_path / "a.txt")) and not locations.exists(str(tmp_path / "b.txt"))


def test_split_list_sizes_is_directory_and_remove_on_a_local_directory(tmp_path):
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "C1.txt").write_bytes(b"a\nb\n")
    (tmp_path / "schema.json").write_bytes(b"{}")
    assert locations.split(str(tmp_path / "schema.json")) == (str(tmp_path), "schema.json")
    assert locations.split("gs://b/out/part-00000-of-00001.parquet") == ("gs://b/out", "part-00000-of-00001.parquet")
    assert locations.list_sizes(str(tmp_path)) == {"vocab/C1.txt": 4, "schema.json": 2}
    assert locations.is_directory(str(tmp_path / "vocab")) and not locations.is_directory(str(tmp_path / "schema.json"))
    locations.remove(str(tmp_path / "schema.json"))
    locations.remove(str(tmp_path / "schema.json"))  # nothing there: nothing to do
    assert locations.list_sizes(str(tmp_path)) == {"vocab/C1.txt": 4}


def _string_constants(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _product_files():
    for package in PRODUCT:
        yield from sorted((REPO / package).rglob("*.py"))


def test_no_module_but_locations_decides_local_or_remote_by_looking_for_a_scheme():
    found = [f"{p.relative_to(REPO)}:{line}" for p in _product_files() if p.name != "locations.py"
             for line, text in _string_constants(p) if text == "://"]
    assert not found, f"use sparse_io.locations.is_remote / join instead: {found}"


@pytest.mark.parametrize("name", [output_files.STATS_FILE, output_files.SCHEMA_FILE, output_files.MANIFEST_FILE,
                                  output_files.REPORT_FILE, output_files.DEAD_LETTERS_FILE])
def test_no_module_but_output_files_spells_an_output_file_name(name):
    found = [f"{p.relative_to(REPO)}:{line}" for p in _product_files() if p.name != "output_files.py"
             for line, text in _string_constants(p) if text == name]
    assert not found, f"take {name!r} from sparse_io.output_files: {found}"
