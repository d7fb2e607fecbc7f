"""Data and config problems exit 2 with one line naming the file and the column, as the README's exit table
says; exit 1 stays for bugs. (Held-out rows fewer than a batch: tests/test_train_eval.py.)"""

import subprocess
import sys

import pytest
import yaml

from pipelines import cli, ingest

CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
        {"name": "user", "kind": "sparse", "dtype": "string"},
        {"name": "movie", "kind": "sparse", "dtype": "string"},
    ]},
    "features": {"user": {"hash_buckets": 100}, "movie": {"hash_buckets": 100}},
    "output": {"format": "parquet", "num_shards": 1},
}


def _ingest_exit(capsys, tmp_path, text):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (tmp_path / "log.csv").write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        ingest.main(["--input", str(tmp_path / "log.csv"), "--config", str(tmp_path / "config.yaml"),
                     "--output", str(tmp_path / "out"), "--no_report", "--runner", "FnApiRunner"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit_info.value.code, err.strip().splitlines()[-1]


def test_a_header_lacking_a_schema_column_exits_2_naming_the_file_and_column(tmp_path, capsys):
    code, line = _ingest_exit(capsys, tmp_path, "rating,user\n3,u1\n4,u2\n")
    assert code == 2, line
    assert line.startswith("pipelines.ingest: error: ") and "log.csv" in line and "['movie']" in line
    assert "internal" not in line and "SPARSEFLOW_DEBUG" not in line


def test_repeated_header_names_exit_2_naming_the_file_and_column(tmp_path, capsys):
    code, line = _ingest_exit(capsys, tmp_path, "rating,user,movie,user\n3,u1,m1,u2\n")
    assert code == 2, line
    assert "log.csv" in line and "['user'] more than once" in line and "SPARSEFLOW_DEBUG" not in line


def test_a_header_error_is_a_data_error_wherever_it_is_raised():
    from sparse_io.errors import LayoutError
    from sparse_io.readers.csv import file_columns
    from sparse_io.schema import FeatureSpec, Schema

    schema = Schema([FeatureSpec("a", "dense", "int64"), FeatureSpec("b", "dense", "int64")])
    with pytest.raises(LayoutError, match="more than once"):
        file_columns(schema, ["a", "b", "a"], "f.csv")
    with pytest.raises(LayoutError, match=r"f.csv: the header lacks column\(s\) \['b'\]"):
        file_columns(schema, ["a"], "f.csv")
    # Raised in a Beam worker, the error comes back as text: the line is found there too.
    wrapped = RuntimeError("sparse_io.errors.LayoutError: f.csv: the header lacks column(s) ['b'] "
                           "[while running 'ReadLogs/ReadFile']")
    assert ingest._data_file_line(wrapped) == "f.csv: the header lacks column(s) ['b']"


def test_the_exit_table_in_help_and_cli_agree():
    assert "2    a usage, config or data error" in cli.EXIT_STATUS
    done = subprocess.run([sys.executable, "-m", "pipelines.train", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "2    a usage, config or data error" in done.stdout
