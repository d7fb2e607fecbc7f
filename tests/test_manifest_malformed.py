"""A malformed `_MANIFEST.json` is a one-line ManifestError naming the file and the fault, on every path."""

import json
import os

import pyarrow as pa
import pytest

from sparse_io import FeatureSpec, Schema, iter_shards, shard_name
from sparse_io.manifest import MANIFEST_FILE, ManifestError, commit_directory, read_manifest, verify_directory
from sparse_io.shard_set import write_shard

SCHEMA = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items", "sparse", "int64")])


@pytest.fixture
def out(tmp_path):
    directory = str(tmp_path / "out")
    os.makedirs(directory)
    for i, n in enumerate((3, 5)):
        rows = [{"label": r, "items": [r]} for r in range(n)]
        write_shard(os.path.join(directory, shard_name(i, 2, ".parquet")),
                    [pa.RecordBatch.from_pylist(rows, schema=SCHEMA.arrow_schema())], SCHEMA, row_group_size=4)
    SCHEMA.save(directory)
    commit_directory(directory)
    return directory


def _edit(directory, change):
    path = os.path.join(directory, MANIFEST_FILE)
    with open(path) as f:
        manifest = json.load(f)
    change(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(m):
        for k in keys[:-1]:
            m = m[k]
        m[keys[-1]] = value
    return change


def _delete(*keys):
    def change(m):
        for k in keys[:-1]:
            m = m[k]
        del m[keys[-1]]
    return change


CASES = {
    "shard without bytes": (_delete("shards", 0, "bytes"), r"shards\[0\].*bytes"),
    "shard without path": (_delete("shards", 1, "path"), r"shards\[1\].*path"),
    "shard bytes a string": (_set("shards", 0, "bytes", "12"), r"shards\[0\].*bytes"),
    "shard rows a string": (_set("shards", 0, "rows", "3"), r"shards\[0\].*rows"),
    "shard without rows": (_delete("shards", 0, "rows"), r"shards\[0\].*rows"),
    "shard a list": (_set("shards", 0, [1, 2]), r"shards\[0\]"),
    "crc not hex": (_set("shards", 0, "crc32c", 7), r"shards\[0\].*crc32c"),
    "files a dict": (_set("files", {}), r"files"),
    "file without crc": (_delete("files", 0, "crc32c"), r"files\[0\].*crc32c"),
    "totals a list": (_set("totals", [1]), r"totals"),
    "rows_out a string": (_set("totals", "rows_out", "8"), r"rows_out"),
    "negative bytes": (_set("shards", 0, "bytes", -1), r"shards\[0\].*bytes"),
    "path leaving the directory": (_set("files", 0, "path", "../x"), r"files\[0\].*path"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("level", ["sizes", "checksums"])
def test_a_manifest_with_a_wrong_field_is_one_manifest_error_naming_file_and_field(out, case, level):
    change, pattern = CASES[case]
    _edit(out, change)
    for read in (lambda: verify_directory(out, level), lambda: list(iter_shards(out, verify=level))):
        with pytest.raises(ManifestError, match=pattern) as caught:
            read()
        message = str(caught.value)
        assert MANIFEST_FILE in message and "\n" not in message


@pytest.mark.parametrize("text", ["", "{", "[]", "null", "\"x\"", "{\"format\": \"sparseflow-manifest\"}"])
def test_a_manifest_that_is_not_one_is_a_manifest_error(out, text):
    with open(os.path.join(out, MANIFEST_FILE), "w") as f:
        f.write(text)
    with pytest.raises(ManifestError, match=MANIFEST_FILE):
        read_manifest(out)


def test_a_directory_in_place_of_the_manifest_is_a_manifest_error(out):
    os.remove(os.path.join(out, MANIFEST_FILE))
    os.makedirs(os.path.join(out, MANIFEST_FILE))
    with pytest.raises(ManifestError, match=f"{MANIFEST_FILE}.*not a file"):
        read_manifest(out)
    with pytest.raises(ManifestError, match=MANIFEST_FILE):
        list(iter_shards(out))


def test_sizes_checks_the_rows_out_total_against_the_shards_listed(out):
    _edit(out, _set("totals", "rows_out", 9))  # the shards are listed with 3 + 5 rows
    with pytest.raises(ManifestError, match="listed with 8 rows but the totals say rows_out 9"):
        verify_directory(out, "sizes")
    with pytest.raises(ManifestError, match="rows_out 9"):
        list(iter_shards(out))
    with pytest.raises(ManifestError, match="rows_out 9"):
        list(iter_shards(os.path.join(out, "part-*.parquet")))
