"""Programs the tf.data tests run in fresh processes.

Usage:
  python tests/tfdata_workers.py resume <parquet_dir> <tfrecord_dir> <work_dir>
  python tests/tfdata_workers.py mwms <parquet_dir>        (TF_CONFIG set)

Each prints one JSON line (prefixed "RESULT ") on stdout.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf

from transforms import InputState, make_dataset

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


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    out = resume(*args) if mode == "resume" else mwms(*args)
    print("RESULT " + json.dumps(out), flush=True)
