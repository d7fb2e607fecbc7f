"""A checkpointed iterator restores exactly in a new process: every reader, shuffled or not, seeded or not.

A shuffle the caller did not seed draws its seed when the dataset is made; a
new process makes the dataset again, so unless the seed travels in the
iterator's checkpoint the restored iterator would read the rest of an epoch in
another order, repeating some rows and never reaching others.
"""

import os

import pytest
import tensorflow as tf
from test_tfdata_dataset import _result, _start
from tfdata_data import random_rows, write_arrow_shards, write_parquet_shards, write_tfrecord_shards
from tfdata_workers import (
    CHECKPOINT_CASES,
    CHECKPOINT_PATHS,
    CHECKPOINT_TAKEN,
    LOG_SCHEMA,
    checkpoint_dataset,
    labels,
)

from sparse_io.manifest import commit_directory
from transforms import make_dataset, make_log_dataset

ROWS = random_rows(120, seed=3)
EPOCHS = 2


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoint_data")
    write_parquet_shards(str(root / "parquet"), ROWS, 3, row_group_size=10)
    write_tfrecord_shards(str(root / "tfrecord"), ROWS, 3)
    write_arrow_shards(str(root / "arrow"), ROWS, 3, record_batch_size=10)
    logs = root / "logs"
    logs.mkdir()
    for k in range(3):
        lines = ["label\tx"] + [f"{r}\t{r / 2}" for r in range(k * 40, (k + 1) * 40)]
        (logs / f"day_{k}.tsv").write_text("\n".join(lines) + "\n")
    commit_directory(str(root / "parquet"))
    return str(root)


def test_checkpoints_restore_exactly_in_a_new_process_for_every_reader_shuffle_and_seed(data_dir, tmp_path):
    first, rest = {}, {}
    for path in CHECKPOINT_PATHS:
        for case in CHECKPOINT_CASES:
            dataset = checkpoint_dataset(data_dir, path, case)
            if path == "arrow_op":
                assert dataset._sparseflow_parquet_source.reader == "op"
            iterator = iter(dataset)
            first[path, case] = labels([next(iterator) for _ in range(CHECKPOINT_TAKEN)])
            tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / f"{path}-{case}"))
            rest[path, case] = labels(iterator)  # what the uninterrupted iterator gives
    restored = _result(_start(["checkpoints", data_dir, str(tmp_path)]))
    wrong = []
    for path in CHECKPOINT_PATHS:
        for case in CHECKPOINT_CASES:
            got = first[path, case] + restored[f"{path}/{case}"]
            for epoch in range(EPOCHS):
                seen = got[epoch * len(ROWS) : (epoch + 1) * len(ROWS)]
                repeated = len(seen) - len(set(seen))
                missing = len(set(range(len(ROWS))) - set(seen))
                if repeated or missing:
                    wrong.append(f"{path} {case} epoch {epoch}: {repeated} rows repeated, {missing} missing")
            if len(got) != EPOCHS * len(ROWS):
                wrong.append(f"{path} {case}: {len(got)} rows in all")
            if restored[f"{path}/{case}"] != rest[path, case]:
                wrong.append(f"{path} {case}: the restored rest differs from the uninterrupted one")
        if path != "logs":
            # Unshuffled logs read file after file; the shard readers permute from the start.
            assert first[path, "ordered"] != first[path, "seeded"], path
        # Without a seed each process draws its own: another first batch (a 1 in 120!/112! chance otherwise).
        assert restored[f"{path}/fresh"] != first[path, "unseeded"][:8], path
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", ["tfrecord", "logs"])
def test_one_epoch_restores_an_unseeded_shuffle_exactly_into_a_dataset_that_drew_another_seed(data_dir, tmp_path, path):
    # With num_epochs=1 there is no epoch loop (the files lead the pipeline, for the tf.data service's
    # split): the drawn seed travels in file_order's scan and the shuffles' saved seeds instead.
    args = dict(num_epochs=1, output="ragged", shuffle=True, seed=None, shuffle_buffer=16)

    def dataset():
        if path == "logs":
            return make_log_dataset(os.path.join(data_dir, "logs"), "tsv", 8, schema=LOG_SCHEMA, **args)
        return make_dataset(os.path.join(data_dir, "tfrecord"), 8, **args)

    iterator = iter(dataset())
    first = labels([next(iterator) for _ in range(CHECKPOINT_TAKEN)])
    tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "one"))
    rest = labels(iterator)
    other = dataset()  # draws another seed: another order from the start
    assert labels([next(iter(other))]) != first[:8]
    restored = iter(other)
    tf.train.Checkpoint(iterator=restored).read(str(tmp_path / "one")).assert_consumed()
    assert labels(restored) == rest
    assert sorted(first + rest) == list(range(len(ROWS)))
