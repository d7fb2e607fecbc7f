"""Serving is the training path: from raw cells the export builds the inputs make_dataset builds from the shards.

For every shipped config and every real sample in ../shared/data (skipped when absent), the log is
ingested (one unshuffled shard, so rows keep their log order), a model is built over its schema.json and
exported with the ingest's reading rules, and for the same rows:
  * the export's `model_inputs` of the raw cells (read here with Python's csv module, not the readers)
    equal the COO triples and dense values `make_dataset` gives from the shards, value for value;
  * `serving_text` (raw cells) and `serving_default` (dense values typed) score the rows as the model
    scores the shards' batch.
History configs (ratings, sessions) are checked on histories built here from the raw events.
"""

import collections
import csv
import gzip
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import yaml
from conftest import SHARED_DATA

from pipelines.ingest import run_ingest
from pipelines.model import BATCH_ROWS, CtrModel
from pipelines.serving import serving_inputs
from pipelines.tasks import resolve_task
from sparse_io.schema import Schema
from transforms.tfdata.dataset import make_dataset

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = REPO / "pipelines" / "configs"
CRITEO_COLUMNS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]

pytestmark = pytest.mark.slow


def _ingest(tmp_path, log, config: dict, name="data"):
    config = {**config, "output": {**config.get("output", {}), "num_shards": 1, "shuffle": False}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / name
    run_ingest(["--input", str(log), "--config", str(path), "--output", str(out), "--no_report",
                "--progress_seconds", "0"])
    return out


def _ctr_model(schema: Schema, embedding_dim: int) -> CtrModel:
    sizes = {s.name: s.vocabulary_size or s.hash_buckets for s in schema.sparse}
    dense = [s.name for s in schema.dense if s.time_unit is None]
    model = CtrModel(sizes, dense, embedding_dim=embedding_dim, hidden_units=(16,), block_size=16, seed=3)
    model.build()
    return model


def _typed(cells: list[str], dtype: str, nulls) -> np.ndarray:
    """A dense column's cells as typed values, parsed here: NaN / the int64 minimum where missing."""
    if dtype in ("int64", "int32"):
        return np.array([np.iinfo(np.int64).min if c in nulls or c == "" else int(float(c)) for c in cells], np.int64)
    return np.array([np.nan if c in nulls or c == "" else float(c) for c in cells], dtype)


def check_ctr_parity(tmp_path, data, cells: dict, *, nulls=("",), embedding_dim=4):
    """The checks of the module doc for a flat (click) ingest `data` and its rows' raw `cells` (column -> texts)."""
    schema = Schema.load(str(data))
    model = _ctr_model(schema, embedding_dim)
    export = resolve_task(schema, "auto").export(model, schema, str(tmp_path / "export"), ingest_dir=str(data))
    loaded = tf.saved_model.load(export)
    rows = len(next(iter(cells.values())))
    (features, label), = make_dataset(str(data), rows, shuffle=False, output="coo", combiner="mean",
                                      format="parquet")
    assert int(tf.shape(label)[0]) == rows  # the ingest kept every row, in log order

    text = serving_inputs(loaded.signatures["serving_text"], cells)
    assert "label" not in text and set(text) == set(model.vocab_sizes) | set(model.dense_features)
    served_inputs = loaded.model_inputs(text)
    for name in model.vocab_sizes:
        coo, got = features[name], served_inputs[name]
        for part in ("row_ids", "col_ids", "gains"):
            np.testing.assert_array_equal(got[part].numpy(), getattr(coo, part).numpy(), err_msg=f"{name}.{part}")
    for name in model.dense_features:
        assert served_inputs[name].dtype == features[name].dtype, name
        np.testing.assert_array_equal(served_inputs[name].numpy(), features[name].numpy(), err_msg=name)

    task = resolve_task(schema, "auto")  # a click label serves a probability, a rating or count a prediction
    output = "probability" if task.name == "ctr" else "prediction"
    raw = model({**features, BATCH_ROWS: tf.constant(rows)}, training=False)
    expected = (tf.sigmoid(raw) if output == "probability" else raw).numpy()
    from_text = loaded.signatures["serving_text"](**text)[output].numpy()
    typed = {name: (_typed(cells[name], features[name].dtype.name, nulls) if name in model.dense_features
                    else cells[name]) for name in text}
    from_typed = loaded.signatures["serving_default"](**serving_inputs(loaded.signatures["serving_default"],
                                                                       typed))[output].numpy()
    assert np.std(expected) > 1e-5  # rows score differently, so a wrong input would show
    np.testing.assert_allclose(from_text, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(from_typed, from_text)
    return loaded


def _csv_cells(path, delimiter=",", header=True, names=None) -> dict:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter=delimiter))
    names = rows[0] if header else names
    rows = rows[1:] if header else rows
    return {name: [r[j] if j < len(r) else "" for r in rows] for j, name in enumerate(names)}


# --- the shipped configs --------------------------------------------------------------------------------


def _criteo_cells(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip("\n")]
    return {name: [r[j] if j < len(r) else "" for r in rows] for j, name in enumerate(CRITEO_COLUMNS)}


@pytest.mark.parametrize("config", ["criteo.yaml", "demo.yaml", "own_logs.yaml"])
def test_a_shipped_click_config_serves_raw_cells_as_the_shards_feed_the_model(config, tmp_path):
    from test_shipped_configs import LOGS

    log = LOGS[config](tmp_path / "log", 300, 7)
    data = _ingest(tmp_path, log, yaml.safe_load((CONFIGS / config).read_text()))
    if config == "own_logs.yaml":
        cells = _csv_cells(log, delimiter="\t")
        nulls = ("", "NA", "NULL", "\\N")
        assert sum(c in nulls for c in cells["tags"]) > 10 and sum(c in nulls for c in cells["item_id"]) > 10
        loaded = check_ctr_parity(tmp_path, data, cells, nulls=nulls)
        assert "event_time" not in loaded.signatures["serving_default"].structured_input_signature[1]
    else:
        check_ctr_parity(tmp_path, data, _criteo_cells(log), embedding_dim=1 if config == "criteo.yaml" else 4)


def _events_histories(events, max_length):
    """(history ids, history weights, target id) of each event with earlier events of its user, built here."""
    by_user = collections.defaultdict(list)
    for e in events:
        by_user[e["user_id"]].append(e)
    out = []
    for user_events in by_user.values():
        user_events.sort(key=lambda e: (e["timestamp"], e["item_id"], e["rating"]))
        for j in range(1, len(user_events)):
            before = user_events[:j]  # the whole history: the export keeps the most recent max_length
            out.append(("|".join(str(e["item_id"]) for e in before), "|".join(repr(e["rating"]) for e in before),
                        str(user_events[j]["item_id"])))
    return out


def check_history_parity(tmp_path, data, histories, item, *, weighted):
    """Scores of raw histories (history text, weight text, target text) equal the model's on the shards."""
    from pipelines.history_model import HistoryModel

    schema = Schema.load(str(data))
    task = resolve_task(schema, "auto")
    model = HistoryModel(item, schema[item].vocabulary_size or schema[item].hash_buckets, task.name,
                         embedding_dim=4, hidden_units=(16,), block_size=16, seed=3)
    model.build()
    export = task.export(model, schema, str(tmp_path / "export"), ingest_dir=str(data))
    served = tf.saved_model.load(export).signatures["serving_default"]
    raw = {item: [h[0] for h in histories], f"target_{item}": [h[2] for h in histories]}
    if weighted:
        raw[f"{item}__weights"] = [h[1] for h in histories]
    (from_raw,) = served(**serving_inputs(served, raw)).values()
    dataset = make_dataset(str(data), 512, shuffle=False, output="coo", combiner="mean", format="parquet",
                           features=list(task.features), label=task.label)
    outputs = [model(task.model_inputs(f, y), training=False).numpy() for f, y in dataset]
    # next_item scores every target of the batch: a row's own is the diagonal, as the export returns it.
    from_shards = np.concatenate([np.diag(o) if task.name == "next_item" else o for o in outputs])
    assert from_raw.shape == from_shards.shape and len(histories) > 20
    assert np.std(from_shards) > 1e-5
    np.testing.assert_allclose(np.sort(from_raw.numpy()), np.sort(from_shards), rtol=1e-5, atol=1e-6)


def test_the_shipped_history_config_serves_raw_histories_as_the_shards_feed_the_model(tmp_path):
    from test_shipped_configs import LOGS

    log = LOGS["user_history.yaml"](tmp_path / "log", 400, 7)
    config = yaml.safe_load((CONFIGS / "user_history.yaml").read_text())
    config["histories"]["max_length"] = 3  # histories longer than that: the export must cut them as the ingest did
    data = _ingest(tmp_path, log, config)
    events = [json.loads(line) for line in open(log, encoding="utf-8")]
    histories = _events_histories(events, 3)
    assert max(h[0].count("|") + 1 for h in histories) > 3
    check_history_parity(tmp_path, data, histories, "item_id", weighted=True)


# --- the real samples --------------------------------------------------------------------------------------


def _need(name):
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real sample {name} not present at {SHARED_DATA}")
    return path


CRITEO_FEATURES = {"C*": {"hash_buckets": 5000}, "C9": {"vocabulary": {"num_oov_buckets": 2}}}


# One of the three PaddleRec samples: the same layout and cell forms (test_real_logs checks each one's ingest),
# so a second and third export of 39 columns would test the same path again at ~45 s each.
@pytest.mark.parametrize("name", ["criteo_paddlerec_dnn_test.tsv"])
def test_real_criteo_tsv_samples_serve_as_the_shards_feed_the_model(name, tmp_path):
    path = _need(name)
    data = _ingest(tmp_path, path, {"input": {"format": "criteo"}, "features": CRITEO_FEATURES})
    check_ctr_parity(tmp_path, data, _criteo_cells(path))


def test_the_real_criteo_csv_sample_with_pandas_floats_serves_as_the_shards_feed_the_model(tmp_path):
    path = _need("criteo_deepctr_sample.csv")
    schema = ([{"name": "label", "kind": "label", "dtype": "int64"}]
              + [{"name": f"I{i}", "kind": "dense", "dtype": "float32"} for i in range(1, 14)]
              + [{"name": f"C{i}", "kind": "sparse", "dtype": "string"} for i in range(1, 27)])
    data = _ingest(tmp_path, path, {"input": {"format": "csv", "schema": schema}, "features": CRITEO_FEATURES})
    cells = _csv_cells(path)
    assert sum(c.endswith(".0") for c in cells["I3"]) > 10  # "260.0": pandas' integers
    check_ctr_parity(tmp_path, data, cells)


def test_the_real_avazu_sample_serves_integer_ids_and_columns_as_the_shards_feed_the_model(tmp_path):
    path = _need("avazu_deepctr_sample.csv")
    schema = [{"name": "click", "kind": "label", "dtype": "int64"},
              {"name": "site_id", "kind": "sparse", "dtype": "string"},
              {"name": "app_id", "kind": "sparse", "dtype": "string"},
              {"name": "device_model", "kind": "sparse", "dtype": "string"},
              {"name": "C14", "kind": "sparse", "dtype": "int64"},
              {"name": "banner_pos", "kind": "sparse", "dtype": "int64"},
              {"name": "C20", "kind": "dense", "dtype": "int64"},  # -1 is a value here, not an id
              {"name": "C21", "kind": "dense", "dtype": "float64"}]
    features = {"site_id": {"hash_buckets": 1000}, "app_id": {"hash_buckets": 1000, "salt": 5},
                "device_model": {"vocabulary": {"num_oov_buckets": 3}}, "C14": {"hash_buckets": 997},
                "banner_pos": {"vocabulary": {"num_oov_buckets": 2}}}
    data = _ingest(tmp_path, path, {"input": {"format": "csv", "schema": schema}, "features": features})
    cells = _csv_cells(path)
    assert "-1" in cells["C20"]
    check_ctr_parity(tmp_path, data, cells)


@pytest.mark.parametrize("separator, null", [("|", ""), ("^", "NA"), (" ", "\\N")])
def test_the_real_movielens_sample_serves_genre_lists_by_the_ingests_separator(separator, null, tmp_path):
    original = _csv_cells(_need("movielens1m_deepctr_sample.csv"))
    names = list(original)
    # The same rows written with another list separator and some genres missing as a null token.
    genres = [null if i % 9 == 0 else g.replace("|", separator) for i, g in enumerate(original["genres"])]
    if separator == " ":  # a space inside a genre ("Children's", "Film-Noir" have none; "Sci-Fi" neither)
        assert not any(" " in g for g in original["genres"])
    rows = zip(*[genres if n == "genres" else original[n] for n in names])
    log = tmp_path / "ratings.csv"
    with open(log, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([names, *rows])
    schema = [{"name": "user_id", "kind": "sparse", "dtype": "int64"},
              {"name": "movie_id", "kind": "sparse", "dtype": "int64"},
              {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
              {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "s"},
              {"name": "title", "kind": "sparse", "dtype": "string"},
              {"name": "genres", "kind": "sparse", "dtype": "string"},
              {"name": "gender", "kind": "sparse", "dtype": "string"},
              {"name": "age", "kind": "dense", "dtype": "int64"},
              {"name": "occupation", "kind": "sparse", "dtype": "int64"}]
    features = {"user_id": {"hash_buckets": 500}, "movie_id": {"vocabulary": {"num_oov_buckets": 3}},
                "title": {"hash_buckets": 500}, "genres": {"vocabulary": {"num_oov_buckets": 1}},
                "gender": {"hash_buckets": 16}, "occupation": {"hash_buckets": 64}}
    data = _ingest(tmp_path, log, {"input": {"format": "csv", "list_separator": separator,
                                             "null_values": ["", null], "schema": schema}, "features": features})
    cells = _csv_cells(log)
    assert sum("," in t for t in cells["title"]) > 0  # quoted titles holding the delimiter
    check_ctr_parity(tmp_path, data, cells, nulls=("", null))


def test_the_real_yoochoose_sample_serves_session_histories_as_the_shards_feed_the_model(tmp_path):
    path = _need("yoochoose-clicks-sample.dat")
    config = {"input": {"format": "csv", "skip_header": False, "schema": [
        {"name": "session_id", "kind": "dense", "dtype": "int64"},
        {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "ms"},
        {"name": "item_id", "kind": "dense", "dtype": "int64"},
        {"name": "category", "kind": "dense", "dtype": "string"}]},
        "histories": {"key": "session_id", "item": "item_id", "time": "timestamp", "max_length": 50,
                      "examples_per_event": True, "item_columns": ["category"]},
        "features": {"item_id": {"hash_buckets": 1000}, "category": {"hash_buckets": 10}}}
    data = _ingest(tmp_path, path, config)
    import datetime

    sessions = collections.defaultdict(list)
    for sid, stamp, item, _ in csv.reader(open(path, newline="", encoding="utf-8")):
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        sessions[sid].append((round(when.timestamp() * 1000), int(item), item))
    histories = []
    for clicks in sessions.values():
        clicks.sort()
        for t, _, item in clicks:
            earlier = [c for c in clicks if c[0] < t]
            if earlier:
                histories.append(("|".join(c[2] for c in earlier), "", item))
    check_history_parity(tmp_path, data, histories, "item_id", weighted=False)
