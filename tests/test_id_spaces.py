"""One id space across ingests: `--vocab_from` gives equal raw values equal ids, and the trainer refuses another."""

import collections
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import tensorflow as tf
import yaml

from pipelines.ingest import run_ingest
from pipelines.synthetic import synthetic_criteo_lines
from sparse_io.id_space import IdSpaceMismatch, check_same_id_spaces, hash_fingerprint
from sparse_io.schema import FeatureSpec, Schema

REPO = pathlib.Path(__file__).resolve().parents[1]
VOCAB = {"C1": 1, "C2": 3}  # feature -> OOV buckets
BUCKETS = 1000
SALT = 7
# The held-out ingest's own config asks for other id settings; --vocab_from must override every one.
OTHER = {"C*": {"hash_buckets": 5000}, "C1": {"hash_buckets": 10}, "C2": {"vocabulary": {"num_oov_buckets": 1}}}
CONFIG = {
    "input": {"format": "criteo"},
    "features": {"C*": {"hash_buckets": BUCKETS}, "C1": {"vocabulary": {"num_oov_buckets": 1}},
                 "C2": {"vocabulary": {"num_oov_buckets": 3, "min_frequency": 2}},
                 "C3": {"hash_buckets": BUCKETS, "salt": SALT}},
    "output": {"format": "parquet", "num_shards": 2, "shuffle": True, "seed": 3},
    "stats": {"batch_sizes": [32]},
}


def _rows(lines):
    """Row index (kept in I1) -> {feature: raw value}, parsed straight from the Criteo layout."""
    rows = {}
    for line in lines:
        fields = line.split("\t") + [""] * 40
        rows[int(fields[1])] = {f"C{i}": fields[13 + i] for i in range(1, 27)}
    return rows


@pytest.fixture(scope="module")
def ingests(tmp_path_factory):
    root = tmp_path_factory.mktemp("id_spaces")
    lines = synthetic_criteo_lines(450, 77, max_id=300)
    # I1 carries the row's index, so ingested rows can be matched with the log's after the shuffle.
    lines = ["\t".join([f.split("\t")[0], str(i), *f.split("\t")[2:]]) for i, f in enumerate(lines)]
    (root / "train.tsv").write_text("\n".join(lines[:300]) + "\n")
    (root / "heldout.tsv").write_text("\n".join(lines[300:]) + "\n")
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (root / "other.yaml").write_text(yaml.safe_dump({**CONFIG, "features": OTHER}))
    common = ["--config", str(root / "config.yaml"), "--no_report"]
    run_ingest(["--input", str(root / "train.tsv"), "--output", str(root / "train"), *common])
    run_ingest(["--input", str(root / "heldout.tsv"), "--output", str(root / "heldout"), "--no_report",
                "--config", str(root / "other.yaml"), "--vocab_from", str(root / "train")])
    run_ingest(["--input", str(root / "heldout.tsv"), "--output", str(root / "alone"), *common])
    return root, _rows(lines[:300]), _rows(lines[300:])


def _ingested(directory):
    table = pq.ParquetDataset(sorted(glob.glob(os.path.join(directory, "part-*.parquet")))).read()
    index = [int(v) for v in table.column("I1").to_pylist()]
    return {name: dict(zip(index, table.column(name).to_pylist())) for name in [f"C{i}" for i in range(1, 27)]}


def _expected_vocabulary(rows, feature, min_frequency):
    counts = collections.Counter(r[feature] for r in rows.values() if r[feature])
    kept = [(-n, token) for token, n in counts.items() if n >= min_frequency]
    return [token for _, token in sorted(kept)]


def _expected_id(feature, raw, vocabulary):
    if feature in VOCAB:
        oov = VOCAB[feature]
        if raw in vocabulary:
            return oov + vocabulary.index(raw)
        # Keras's StringLookup puts OOV strings in Fingerprint64 buckets.
        return 0 if oov == 1 else int(tf.strings.to_hash_bucket_fast([raw], oov)[0])
    if feature == "C3":  # Keras's Hashing(salt=7) keys the strong hash with [7, 7]
        return int(tf.strings.to_hash_bucket_strong([raw], BUCKETS, key=[SALT, SALT])[0])
    return int(tf.strings.to_hash_bucket_fast([raw], BUCKETS)[0])


def test_held_out_rows_get_the_training_ids_value_by_value(ingests):
    root, train_rows, heldout_rows = ingests
    vocabularies = {}
    for feature, min_frequency in (("C1", 1), ("C2", 2)):
        written = (root / "train" / "vocab" / f"{feature}.txt").read_text().splitlines()
        assert written == _expected_vocabulary(train_rows, feature, min_frequency)
        assert (root / "heldout" / "vocab" / f"{feature}.txt").read_bytes() == \
            (root / "train" / "vocab" / f"{feature}.txt").read_bytes()
        vocabularies[feature] = written
    oov = collections.Counter()
    for name, rows in (("train", train_rows), ("heldout", heldout_rows)):
        ingested = _ingested(root / name)
        assert set(ingested["C1"]) == set(rows)
        for feature, by_row in ingested.items():
            for row, ids in by_row.items():
                raw = rows[row][feature]
                assert ids == ([_expected_id(feature, raw, vocabularies.get(feature))] if raw else []), (
                    name, feature, row, raw)
                if name == "heldout" and feature in VOCAB and raw and raw not in vocabularies[feature]:
                    oov[feature] += 1
    assert oov["C1"] > 0  # the held-out part has values training never saw
    train_schema, heldout_schema = Schema.load(str(root / "train")), Schema.load(str(root / "heldout"))
    stats = json.loads((root / "heldout" / "stats.json").read_text())
    for feature, buckets in VOCAB.items():
        spec = heldout_schema[feature]
        assert spec.vocabulary_size == buckets + len(vocabularies[feature]) == train_schema[feature].vocabulary_size
        assert spec.num_oov_buckets == buckets
        assert spec.oov_ids == stats["features"][feature]["oov_ids"] == oov[feature]
    assert heldout_schema["C4"].id_space == hash_fingerprint(BUCKETS, None)
    assert heldout_schema["C3"].salt == SALT and heldout_schema["C3"].id_space == hash_fingerprint(BUCKETS, SALT)
    check_same_id_spaces(train_schema, heldout_schema)


def test_the_trainer_refuses_held_out_data_from_an_independent_ingest(ingests, tmp_path):
    root, _, _ = ingests
    with pytest.raises(IdSpaceMismatch, match="feature 'C1'"):
        check_same_id_spaces(Schema.load(str(root / "train")), Schema.load(str(root / "alone")))
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.train", "--data", str(root / "train"), "--eval_data", str(root / "alone"),
         "--model_dir", str(tmp_path / "m"), "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "pipelines.train" in line]
    assert len(lines) == 1 and "feature 'C1'" in lines[0] and "--vocab_from" in lines[0], done.stderr[-2000:]
    assert not (tmp_path / "m" / "checkpoints").exists()


def test_fingerprints_tell_hash_settings_apart():
    a = Schema([FeatureSpec("f", hash_buckets=10, id_space=hash_fingerprint(10, None))])
    salted = Schema([FeatureSpec("f", hash_buckets=10, salt=7, id_space=hash_fingerprint(10, 7))])
    with pytest.raises(IdSpaceMismatch, match="feature 'f'"):
        check_same_id_spaces(a, salted)
    with pytest.raises(IdSpaceMismatch, match="feature 'f': missing"):
        check_same_id_spaces(a, Schema([FeatureSpec("g", hash_buckets=10)]))
    assert Schema.from_json(salted.to_json()) == salted


def test_vocab_from_must_name_an_ingest_output_that_holds_every_feature(ingests, tmp_path):
    from pipelines.config import parse_config
    from pipelines.errors import UsageError
    from sparse_io.manifest import commit_directory

    root, _, _ = ingests
    assert parse_config({"vocab_from": "out/train", "features": OTHER}).vocab_from == "out/train"
    common = ["--input", str(root / "heldout.tsv"), "--config", str(root / "config.yaml"), "--no_report"]
    with pytest.raises(UsageError, match="--vocab_from .*no schema.json"):
        run_ingest([*common, "--output", str(tmp_path / "a"), "--vocab_from", str(tmp_path / "nothing")])
    schema = Schema.load(str(root / "train"))
    shutil.copytree(root / "train" / "vocab", tmp_path / "partial" / "vocab")
    (tmp_path / "partial" / "schema.json").write_text(schema.select([n for n in schema.names if n != "C7"]).to_json())
    # A committed output (a source without a manifest is refused before its schema is read).
    shutil.copy(root / "train" / "part-00000-of-00002.parquet", tmp_path / "partial")
    commit_directory(str(tmp_path / "partial"))
    with pytest.raises(UsageError, match="feature 'C7' is not in its schema.json"):
        run_ingest([*common, "--output", str(tmp_path / "b"), "--vocab_from", str(tmp_path / "partial")])
