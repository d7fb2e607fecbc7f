"""End to end: `python -m pipelines.ingest` with column sources, then `make_dataset` reads the list feature."""

import csv
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
HISTORY = 50

CONFIG = """
input:
  format: csv
  encoding: latin-1
  schema:
    - {name: clicked, kind: label, from: "click:int", in: [1]}
    - {name: user, dtype: string, column: "user_id:token"}
    - {name: his_cate, dtype: int64, columns: {name: his_cate}, padding: "0", mask: {name: his_mask}}
    - {name: price, kind: dense, dtype: float32}
features:
  user: {hash_buckets: 1000}
output: {format: parquet, num_shards: 1, shuffle: false}
stats: {batch_sizes: [8]}
error_budget: 0.05
"""


def _write(path: pathlib.Path, rows: int, seed: int) -> list[dict]:
    """An Alimama-like log in Latin-1 with a typed user column; the expected rows worked out cell by cell."""
    rng = random.Random(seed)
    expected = []
    with open(path, "w", newline="", encoding="latin-1") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["click:int", "user_id:token", "price", "city"] + ["his_cate"] * HISTORY
                        + ["his_mask"] * HISTORY)
        for i in range(rows):
            length = rng.randint(0, HISTORY)
            cells = [str(rng.randint(1, 99)) for _ in range(length)] + ["0"] * (HISTORY - length)
            mask = ["1" if rng.random() < 0.9 else "0" for _ in range(length)] + ["0"] * (HISTORY - length)
            click = "" if i == 7 else str(rng.randint(0, 3))  # row 7: a missing source value, a dead letter
            writer.writerow([click, f"u{i % 13}", f"{rng.randint(1, 500) / 4}", "Malmö"] + cells + mask)
            if click:
                expected.append({"clicked": int(click == "1"), "his_cate": [int(c) for c, m in zip(cells, mask)
                                                                            if m == "1" and c != "0"]})
    return expected


def _ingest(tmp_path, log, config_text):
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.ingest", "--input", str(log), "--config", str(config), "--output", str(out),
         "--no_report"],
        capture_output=True, text=True, env=env, timeout=600)
    return done, out


@pytest.mark.slow
def test_ingest_then_make_dataset_reads_the_history_list(tmp_path):
    import tensorflow as tf

    from transforms.tfdata.dataset import make_dataset

    log = tmp_path / "alimama.csv"
    expected = _write(log, 120, seed=5)
    done, out = _ingest(tmp_path, log, CONFIG)
    assert done.returncode == 0, done.stderr[-3000:]
    schema = {f["name"]: f for f in json.loads((out / "schema.json").read_text())["features"]}
    assert list(schema) == ["clicked", "user", "his_cate", "price"]  # the source column "click:int" is not kept
    letters = [json.loads(line) for line in (out / "errors" / "dead_letters.jsonl").read_text().splitlines()]
    assert [(d["line"], d["reason"]) for d in letters] == [(9, "clicked: source column 'click:int' is missing")]
    dataset = make_dataset(str(out), 16, shuffle=False, output="ragged", features=["his_cate", "user"],
                           label="clicked")
    histories, labels = [], []
    for features, label in dataset:
        assert isinstance(features["his_cate"], tf.RaggedTensor)
        histories += features["his_cate"].to_list()
        labels += label.numpy().tolist()
    assert histories == [r["his_cate"] for r in expected]
    assert labels == [r["clicked"] for r in expected]


@pytest.mark.parametrize("schema, message", [
    ('[{name: y, kind: label}, {name: his_cate, dtype: int64}]',
     "names column(s) ['his_cate'] more than once"),
    ('[{name: y, kind: label, from: "click:int", at_least: 1}, '
     '{name: h, dtype: int64, columns: {name: his_cate}, mask: {name: price}}]',
     "the mask {name: price} has 1 columns, columns {name: his_cate} has 50"),
    ('[{name: y, kind: label, from: "click:int", at_least: 1}, {name: h, dtype: int64, columns: {name: his_cat}}]',
     "lacks column(s) ['his_cat']"),
])
def test_a_header_that_does_not_fit_exits_2_naming_the_column(tmp_path, schema, message):
    log = tmp_path / "alimama.csv"
    _write(log, 3, seed=1)
    done, _ = _ingest(tmp_path, log, f"input:\n  format: csv\n  encoding: latin-1\n  schema: {schema}\n")
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = [text for text in done.stderr.splitlines() if "error:" in text]
    assert message in line and "alimama.csv" in line
