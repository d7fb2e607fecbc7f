"""`make_dataset(..., balance="rows")`: every input worker reads the same rows +-1 however uneven the files."""

import os

import pytest
import tensorflow as tf
from tfdata_data import SCHEMA, random_rows, to_table

from sparse_io import shard_name
from sparse_io.manifest import commit_directory
from sparse_io.shard_set import write_shard
from transforms.tfdata.core.state import InputState
from transforms.tfdata.dataset import make_dataset

FILE_ROWS = (61, 7, 23, 3, 17)  # 111 rows in 5 uneven files
WORKERS, BATCH = 3, 4
SUFFIXES = {"parquet": ".parquet", "arrow": ".arrow", "tfrecord": ".tfrecord"}


def _uneven(directory, fmt):
    rows = random_rows(sum(FILE_ROWS), seed=11)
    os.makedirs(directory)
    start = 0
    for k, n in enumerate(FILE_ROWS):
        path = os.path.join(directory, shard_name(k, len(FILE_ROWS), SUFFIXES[fmt]))
        write_shard(path, [to_table(rows[start:start + n])], SCHEMA, row_group_size=5)
        start += n
    SCHEMA.save(directory)
    commit_directory(directory)
    return directory


def _epochs(path, index, balance, **kwargs):
    """Per epoch, the batches' labels of worker `index` (two epochs)."""
    ds = make_dataset(path, BATCH, output="ragged", num_epochs=2, num_shards=WORKERS, index=index, balance=balance,
                      **kwargs)
    labels = [[int(v) for v in label.numpy()] for _, label in ds]
    # Each epoch ends with its own (possibly partial) batch: split where a batch is short, else in half.
    short = [i for i, b in enumerate(labels) if len(b) < BATCH]
    cut = short[0] + 1 if short and short[0] + 1 < len(labels) else len(labels) // 2
    return labels[:cut], labels[cut:]


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "tfrecord"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_rows_balance_gives_every_worker_the_same_batches_and_every_row_once_per_epoch(tmp_path, fmt, shuffle):
    out = _uneven(str(tmp_path / "out"), fmt)
    per_worker = [_epochs(out, i, "rows", shuffle=shuffle, seed=3) for i in range(WORKERS)]
    total = sum(FILE_ROWS)
    for epoch in range(2):
        batches = [len(w[epoch]) for w in per_worker]
        rows = [sum(len(b) for b in w[epoch]) for w in per_worker]
        # 111 rows over 3 workers: 37 each, 10 batches of 4 (the last of 1).
        assert rows == [total // WORKERS] * WORKERS and batches == [-(-(total // WORKERS) // BATCH)] * WORKERS
        seen = sorted(v for w in per_worker for b in w[epoch] for v in b)
        assert seen == list(range(total))
    # The files are uneven enough that whole files would not balance: the test data shows the problem.
    by_files = [sum(len(b) for b in _epochs(out, i, "files", shuffle=False)[0]) for i in range(WORKERS)]
    assert by_files == [61 + 3, 7 + 17, 23]


def test_rows_balance_with_a_remainder_gives_batches_within_one(tmp_path):
    out = _uneven(str(tmp_path / "out"), "parquet")
    # 111 rows over 4 workers: 27, 28, 28, 28 rows; 7 batches each; with drop_remainder 6, 7, 7, 7.
    counts = []
    for index in range(4):
        ds = make_dataset(out, BATCH, shuffle=False, output="ragged", num_shards=4, index=index, balance="rows",
                          drop_remainder=True)
        counts.append(sum(1 for _ in ds))
    assert counts == [6, 7, 7, 7]


def test_a_balanced_parquet_worker_resumes_from_its_input_state(tmp_path):
    out = _uneven(str(tmp_path / "out"), "parquet")
    kwargs = dict(shuffle=True, seed=5, output="ragged", num_shards=WORKERS, index=2, balance="rows", num_epochs=2)
    whole = [[int(v) for v in label.numpy()] for _, label in make_dataset(out, BATCH, **kwargs)]
    ds = make_dataset(out, BATCH, return_position=True, **kwargs)
    it = iter(ds)
    head = []
    for _ in range(13):  # into the second epoch
        _, label, position = next(it)
        head.append([int(v) for v in label.numpy()])
    state = InputState.from_tensor(position)
    rest = [[int(v) for v in label.numpy()] for _, label in make_dataset(out, BATCH, start=state, **kwargs)]
    assert head + rest == whole
    with pytest.raises(ValueError, match="plan"):
        next(iter(make_dataset(out, BATCH, start=state, **{**kwargs, "balance": "files"})))


def test_a_balanced_tfrecord_worker_resumes_from_an_iterator_checkpoint(tmp_path):
    out = _uneven(str(tmp_path / "out"), "tfrecord")
    kwargs = dict(shuffle=True, seed=5, output="ragged", num_shards=WORKERS, index=1, balance="rows", num_epochs=2)
    whole = [[int(v) for v in label.numpy()] for _, label in make_dataset(out, BATCH, **kwargs)]
    it = iter(make_dataset(out, BATCH, **kwargs))
    head = [[int(v) for v in next(it)[1].numpy()] for _ in range(12)]
    checkpoint = tf.train.Checkpoint(iterator=it)
    saved = checkpoint.save(str(tmp_path / "ckpt" / "it"))
    resumed = iter(make_dataset(out, BATCH, **kwargs))
    tf.train.Checkpoint(iterator=resumed).restore(saved)
    rest = [[int(v) for v in label.numpy()] for _, label in resumed]
    assert head + rest == whole


def test_an_unknown_balance_is_refused_naming_the_choices(tmp_path):
    out = _uneven(str(tmp_path / "out"), "parquet")
    with pytest.raises(ValueError, match=r"balance must be one of 'files', 'rows', got 'even'"):
        make_dataset(out, BATCH, balance="even")
