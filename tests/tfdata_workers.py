"""Programs the tf.data tests run in fresh processes.

Usage:
  python tests/tfdata_workers.py resume <parquet_dir> <tfrecord_dir> <work_dir>
  python tests/tfdata_workers.py mwms <parquet_dir>        (TF_CONFIG set)
  python tests/tfdata_workers.py checkpoints <data_dir> <work_dir>
  python tests/tfdata_workers.py service-worker <dispatcher_address> <port>   (until stdin closes)

Each prints one JSON line (prefixed "RESULT ") on stdout.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf

from sparse_io.schema import FeatureSpec, Schema
from transforms import InputState, make_dataset, make_log_dataset
from transforms.tfdata.service import load_reader_ops

RESUME_ARGS = dict(batch_size=16, shuffle=True, seed=9, num_epochs=2, output="ragged")


def labels(batches) -> list[int]:
    out = []
    for element in batches:
        out += element[1].numpy().tolist()
    return out


def resume(parquet_dir: str, tfrecord_dir: str, work_dir: str) -> dict:
    """The rows after each saved position, restored here in a new process."""
    with open(os.path.join(work_dir, "state.json")) as f:
        state = InputState.from_json(f.read())
    result = {"parquet_state": labels(make_dataset(parquet_dir, start=state, **RESUME_ARGS))}
    for name, directory in (("parquet_checkpoint", parquet_dir), ("tfrecord_checkpoint", tfrecord_dir)):
        iterator = iter(make_dataset(directory, **RESUME_ARGS))
        tf.train.Checkpoint(iterator=iterator).read(os.path.join(work_dir, name)).assert_consumed()
        result[name] = labels(iterator)
    return result


# Every reading path x shuffle and seed that a checkpoint must restore exactly.
# "arrow" reads CSR (the Python reader); "arrow_op" the same shards as COO (the native Arrow op).
CHECKPOINT_PATHS = ("parquet", "tfrecord", "arrow", "arrow_op", "logs")
CHECKPOINT_CASES = {"unseeded": dict(shuffle=True, seed=None), "seeded": dict(shuffle=True, seed=5),
                    "ordered": dict(shuffle=False, seed=None)}
CHECKPOINT_TAKEN = 5  # batches read before saving: mid-epoch (15 batches of 8 per epoch)
LOG_SCHEMA = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("x", "dense", "float32")])


def checkpoint_dataset(data_dir: str, path: str, case: str) -> tf.data.Dataset:
    """Two epochs of 120 rows (labels 0..119) in batches of 8, read by `path`'s reader."""
    args = dict(num_epochs=2, output="ragged", **CHECKPOINT_CASES[case])
    if path == "logs":
        return make_log_dataset(os.path.join(data_dir, "logs"), "tsv", 8, schema=LOG_SCHEMA, shuffle_buffer=16,
                                **args)
    if path == "arrow_op":
        return make_dataset(os.path.join(data_dir, "arrow"), 8, **{**args, "output": "coo"})
    return make_dataset(os.path.join(data_dir, path), 8, shuffle_buffer=16, **args)


def restore_checkpoints(data_dir: str, work_dir: str) -> dict:
    """Per path and case: the rest after the checkpoint saved there; and a fresh unseeded first batch."""
    result = {}
    for path in CHECKPOINT_PATHS:
        result[f"{path}/fresh"] = labels([next(iter(checkpoint_dataset(data_dir, path, "unseeded")))])
        for case in CHECKPOINT_CASES:
            iterator = iter(checkpoint_dataset(data_dir, path, case))
            checkpoint = tf.train.Checkpoint(iterator=iterator)
            checkpoint.read(os.path.join(work_dir, f"{path}-{case}")).assert_consumed()
            result[f"{path}/{case}"] = labels(iterator)
    return result


def mwms(shard_dir: str) -> dict:
    """This worker's labels through distribute_datasets_from_function."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(shard_dir, 25, input_context=context, shuffle=True, seed=1, output="coo")

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    seen = []
    for _features, label in dataset:
        for part in strategy.experimental_local_results(label):
            seen += part.numpy().tolist()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    return {
        "task": task,
        "labels": seen,
        "workers": strategy.cluster_resolver.cluster_spec().num_tasks("worker"),
    }


def service_worker(dispatcher_address: str, port: str) -> dict:
    """A tf.data service worker in this process until stdin closes; returns this process's pid.

    Prints "READY <pid>" once the worker serves. `port` "0" takes a free
    port; static sharding needs the one the dispatcher lists. Workers learn
    of a new job at their heartbeat: a short one starts them together.
    """
    load_reader_ops()  # the native Arrow dataset op, for datasets that read Arrow shards through it
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher_address, port=int(port), heartbeat_interval_ms=50
    )
    worker = tf.data.experimental.service.WorkerServer(config)
    print(f"READY {os.getpid()}", flush=True)
    sys.stdin.read()
    del worker
    return {"pid": os.getpid()}


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    run = {"resume": resume, "mwms": mwms, "checkpoints": restore_checkpoints, "service-worker": service_worker}[mode]
    out = run(*args)
    print("RESULT " + json.dumps(out), flush=True)
