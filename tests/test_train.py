"""The trainer end to end: it learns, resumes exactly (also after SIGKILL), and serves raw ids as trained."""

import gzip
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo
from pipelines.train import train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CONFIG = os.path.join(REPO, "pipelines", "configs", "demo.yaml")
# A model small enough that a few dozen steps take seconds on two cores.
SMALL = ["--batch_size", "128", "--embedding_dim", "8", "--hidden_units", "64", "--block_size", "16", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    # Seeds 1000 and 1001 share one click model (see pipelines.synthetic): a training day and a held-out day.
    train_log = write_synthetic_criteo(str(root / "train.tsv.gz"), 4000, 1000)
    heldout_log = write_synthetic_criteo(str(root / "heldout.tsv.gz"), 1500, 1001)
    for name, log in (("train", train_log), ("heldout", heldout_log)):
        run_ingest(["--input", log, "--config", DEMO_CONFIG, "--output", str(root / name), "--no_report"])
    return root


def _train(data, model_dir, *extra):
    return train(["--data", str(data / "train"), "--model_dir", str(model_dir), *SMALL, *extra])


def _checkpointed_variables(model_dir) -> dict[str, np.ndarray]:
    path = tf.train.latest_checkpoint(os.path.join(str(model_dir), "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    return {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.startswith(("model/", "optimizer/", "step", "position"))
    }


def _assert_same_state(a_dir, b_dir):
    a, b = _checkpointed_variables(a_dir), _checkpointed_variables(b_dir)
    # Every layer's weights are in the checkpoint, not just some.
    for part in ("model/embedding_C26/", "model/hidden_0/", "model/head/"):
        assert any(k.startswith(part) for k in a), part
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_training_lowers_held_out_loss_and_beats_chance(data, tmp_path):
    heldout = ["--eval_data", str(data / "heldout"), "--export", "none"]
    first = _train(data, tmp_path / "m", "--steps", "1", *heldout)
    later = _train(data, tmp_path / "m", "--steps", "80", "--resume", *heldout)  # resumes at step 1
    assert later["steps"] == 80
    assert later["eval_loss"] < first["eval_loss"] - 0.01
    assert later["eval_auc"] > 0.6 and later["eval_rows"] == 1500
    assert math.isfinite(later["loss"])


def test_resumed_training_equals_an_uninterrupted_run(data, tmp_path):
    _train(data, tmp_path / "whole", "--steps", "10", "--export", "none")
    _train(data, tmp_path / "parts", "--steps", "4", "--export", "none")
    resumed = _train(data, tmp_path / "parts", "--steps", "10", "--export", "none", "--resume")
    assert resumed["steps"] == 10
    _assert_same_state(tmp_path / "whole", tmp_path / "parts")


def test_training_killed_mid_run_resumes_from_its_last_checkpoint(data, tmp_path):
    killed = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.train", "--data", str(data / "train"), "--model_dir", str(killed),
         *SMALL, "--steps", "100000", "--checkpoint_every", "3", "--export", "none"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    index = killed / "checkpoints" / "checkpoint"
    deadline = time.monotonic() + 240
    try:
        while not index.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert index.exists(), "the trainer wrote no checkpoint"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    at = int(_checkpointed_variables(killed)["step/.ATTRIBUTES/VARIABLE_VALUE"])
    assert at > 0 and at % 3 == 0
    resumed = _train(data, killed, "--steps", str(at + 5), "--export", "none", "--resume")
    assert resumed["steps"] == at + 5
    _train(data, tmp_path / "whole", "--steps", str(at + 5), "--export", "none")
    _assert_same_state(tmp_path / "whole", killed)


def _raw_rows(path):
    """The held-out log parsed straight from the Criteo layout: raw id strings and floats (NaN when empty)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    raw = {f"I{i}": [] for i in range(1, 14)} | {f"C{i}": [] for i in range(1, 27)}
    for line in lines:
        fields = line.split("\t")
        fields += [""] * (40 - len(fields))
        for i in range(1, 14):
            raw[f"I{i}"].append(float(fields[i]) if fields[i] else float("nan"))
        for i in range(1, 27):
            raw[f"C{i}"].append(fields[13 + i])
    return {k: tf.constant(v, tf.float32 if k[0] == "I" else tf.string) for k, v in raw.items()}


def test_serving_signature_on_raw_ids_scores_rows_as_the_trained_model_does(data, tmp_path):
    from pipelines.model import CtrModel
    from sparse_io.schema import Schema
    from transforms.tfdata.dataset import make_dataset

    model_dir = tmp_path / "m"
    result = _train(data, model_dir, "--steps", "30")
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    from_raw = served(**_raw_rows(data / "heldout.tsv.gz"))["probability"].numpy()

    # The same weights, restored into a model fed the ingested (hashed) shards.
    schema = Schema.load(str(data / "train"))
    model = CtrModel({s.name: s.hash_buckets for s in schema.sparse}, [s.name for s in schema.dense],
                     embedding_dim=8, hidden_units=(64,), block_size=16)
    model.build()
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(model_dir / "checkpoints"))).expect_partial()
    dataset = make_dataset(str(data / "heldout"), 128, shuffle=False, output="coo", combiner="mean", format="parquet")
    from_shards = np.concatenate([tf.sigmoid(model(f)).numpy() for f, _ in dataset])

    assert from_raw.shape == from_shards.shape == (1500,)
    assert np.std(from_raw) > 1e-3  # the model tells rows apart, so the comparison has teeth
    # The shards are shuffled; the multiset of scores must match.
    np.testing.assert_allclose(np.sort(from_raw), np.sort(from_shards), rtol=1e-4, atol=1e-6)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _local_cluster(workers: int) -> dict:
    return {"worker": [f"localhost:{_free_port()}" for _ in range(workers)]}


def _run_workers(data, model_dir, cluster, *extra) -> list[tuple[str, str]]:
    """Runs `pipelines.train --strategy multi_worker` in one process per worker of `cluster`; their outputs."""
    procs = []
    for index in range(len(cluster["worker"])):
        env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "pipelines.train", "--data", str(data / "train"),
             "--model_dir", str(model_dir), *SMALL, "--strategy", "multi_worker", "--export", "none", "--resume",
             *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    try:
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    return outputs


def test_two_local_workers_train_with_multi_worker_mirrored_strategy(data, tmp_path):
    outputs = _run_workers(data, tmp_path / "m", _local_cluster(2), "--steps", "6", "--checkpoint_every", "3")
    chief = json.loads(outputs[0][0][outputs[0][0].index("{"):])
    assert chief["steps"] == 6 and math.isfinite(chief["loss"])
    # The chief's checkpoint is the one in --model_dir; the other worker's went aside.
    assert _checkpointed_variables(tmp_path / "m")["step/.ATTRIBUTES/VARIABLE_VALUE"] == 6
    assert (tmp_path / "m" / "workers" / "worker-1" / "checkpoints").is_dir()


def _worker_positions(data, workers: int, steps: int) -> list[list[list[int]]]:
    """Per worker of a `workers`-worker cluster, the input position after each of its first `steps` batches.

    The trainer's own dataset for that worker (same flags, same part of the data), read here in one process.
    """
    from pipelines.tasks import resolve_task
    from pipelines.train import _args, _dataset
    from sparse_io.schema import Schema

    args, _ = _args(["--data", str(data / "train"), "--model_dir", "unused", *SMALL, "--steps", str(steps)])
    task = resolve_task(Schema.load(args.data), args.task)
    out = []
    for index in range(workers):
        context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=index,
                                             num_replicas_in_sync=workers)
        dataset = _dataset(args, task, args.data, training=True, input_context=context)
        out.append([after.numpy().tolist() for _, _, after in dataset.take(steps)])
    return out


def _saved_positions(checkpoint_dir) -> tuple[int, list[list[int]]]:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(checkpoint_dir)))
    return (int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")),
            reader.get_tensor("position/.ATTRIBUTES/VARIABLE_VALUE").tolist())


def test_restarted_workers_each_resume_their_own_input_where_they_stopped(data, tmp_path):
    model_dir = tmp_path / "m"
    # 4000 rows in two parts of 2000: 15 full batches of 128 per worker and epoch, so 20 steps cross an epoch.
    expected = _worker_positions(data, 2, 20)
    assert expected[0][-1] != expected[1][-1]  # disjoint parts: the rows tell the workers apart
    cluster = _local_cluster(2)
    # Each checkpoint, the chief's in --model_dir and the other worker's aside, holds both workers' positions.
    checkpoint_dirs = (model_dir / "checkpoints", model_dir / "workers" / "worker-1" / "checkpoints")

    _run_workers(data, model_dir, cluster, "--steps", "4", "--checkpoint_every", "2")
    for directory in checkpoint_dirs:
        assert _saved_positions(directory) == (4, [expected[0][3], expected[1][3]])

    # The same cluster restarted (what MultiWorkerMirroredStrategy recovery does): each worker goes on from its
    # row, so batches 5..20 follow the 4 already trained on, none read twice and none skipped.
    outputs = _run_workers(data, model_dir, cluster, "--steps", "20", "--checkpoint_every", "2", "-v")
    for directory in checkpoint_dirs:
        assert _saved_positions(directory) == (20, [expected[0][19], expected[1][19]])
    for index, (_, err) in enumerate(outputs):
        assert f"worker {index} resumes its input at" in err, err[-3000:]

    # One worker where two saved: the saved rows belong to another split of the data, so it reads from the start.
    outputs = _run_workers(data, model_dir, _local_cluster(1), "--steps", "22", "--checkpoint_every", "2")
    assert "input positions of 2 workers" in outputs[0][1], outputs[0][1][-3000:]
    assert _saved_positions(model_dir / "checkpoints") == (22, [_worker_positions(data, 1, 2)[0][1]])
