"""Reliability: seeded single-bit flips in shards, read by the readers users call; every flip an error or no change.

    python -m benchmarks.reliability [--quick] [--flips N] [--seed S]

One small ingest output (a synthetic Criteo log, Parquet shards, stats.json,
committed) is converted to Arrow and TFRecord with `pipelines.convert`.
For each format, `flips` times: one bit of one shard is flipped (the shard,
byte and bit drawn from a seeded generator, anywhere in the file: pages,
headers, footers, frames), one reader reads the whole output at the default
`verify="sizes"` (which cannot see a same-size change), and the bit is put
back. The readers take turns:

  iter_shards   `sparse_io.iter_shards(directory)`, every table;
  columnar      the reader inside make_dataset's py_function for Parquet
                and Arrow shards, without TensorFlow around it: the
                manifest checked, the shards pinned, every batch of a
                `ColumnarSource` read (TFRecord: not used);
  make_dataset  `make_dataset(directory, 64, shuffle=False, output="ragged")`;
  train         the reader `pipelines.train` builds (`train._dataset`: COO
                batches padded to stats.json's capacities, overflow="drop",
                mean combiner, a seeded shuffle, whole batches; Parquet and
                Arrow, the formats it trains from);
  convert       `pipelines.convert` of the output to another format, read
                back with iter_shards.

The cheap readers (iter_shards, columnar) take most flips in turn; the
costly ones one flip in a few each (`DEFAULT_SCHEDULE`).

Each read is compared with the same reader's read of the intact output. A
flip ends as one of:

  same      the reader returned exactly the intact output's data (the bit
            was in bytes no reader uses, such as statistics);
  refused   it raised an error naming the damage: `CorruptFileError`,
            `ManifestError`, or a TensorFlow error carrying one of them or
            TensorFlow's own record check (DataLossError);
  unclear   it raised something else (a bug to fix: the message may not say
            which file is damaged);
  silent    it returned other data without an error: the failure this
            section exists to count (must be 0).

The peer: the same flips read by pyarrow or TensorFlow alone, as a program
without sparseflow's readers would (`pyarrow.parquet.read_table`, the IPC
file reader's `read_all`, `tf.data.TFRecordDataset`), in a child process,
since an unchecked read of a damaged file can crash (counted as "crashed",
and the child started again); any error counts as refused for it. The
comparison row per format is the share of flips that end refused or same:
ours must be 100%.

The test suite runs a few hundred flips per format (tests/test_bit_flips.py);
the benchmark runs more and reports the counts per format and reader.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
import types
from collections.abc import Callable

__all__ = ["FLIP_FORMATS", "READERS", "flip_campaign", "small_output", "run"]

FLIP_FORMATS = ("parquet", "arrow", "tfrecord")
READERS = ("iter_shards", "columnar", "make_dataset", "train", "convert")
# How often each costly reader reads a flip (one flip in `period`); the other flips go to the cheap
# readers in turn. A make_dataset or train read costs a graph and a tf.data pipeline (~0.5-1.5 s here).
DEFAULT_SCHEDULE = (("convert", 25), ("train", 20), ("make_dataset", 10))
CHEAP_READERS = ("iter_shards", "columnar")
OUTCOMES = ("same", "refused", "unclear", "silent")
_CONFIG = """\
input: {format: criteo}
features: {"C*": {hash_buckets: 1000}, C9: {vocabulary: {min_frequency: 1}}}
output: {format: parquet, num_shards: 2, row_group_size: 60, shuffle: true, seed: 3}
stats: {batch_sizes: [64]}
"""


def small_output(root: str, rows: int = 240, seed: int = 4) -> dict[str, str]:
    """One committed ingest output of `rows` synthetic Criteo rows per shard format: {format: directory}."""
    from pipelines.convert import convert_output
    from pipelines.ingest import run_ingest
    from pipelines.synthetic import write_synthetic_criteo

    log = write_synthetic_criteo(os.path.join(root, "day.tsv"), rows, seed)
    config = os.path.join(root, "ingest.yaml")
    with open(config, "w") as f:
        f.write(_CONFIG)
    outputs = {"parquet": os.path.join(root, "parquet")}
    run_ingest(["--input", log, "--config", config, "--output", outputs["parquet"], "--no_report",
                "--progress_seconds", "0"])
    for fmt in FLIP_FORMATS[1:]:
        outputs[fmt] = os.path.join(root, fmt)
        convert_output(outputs["parquet"], outputs[fmt], fmt)
    return outputs


def _digest(value) -> str:
    """A digest of nested tensors, arrays and tables: equal data, equal digest (NaN included, bit for bit)."""
    import numpy as np
    import pyarrow as pa
    import tensorflow as tf

    h = hashlib.sha256()

    def add(x):
        if isinstance(x, pa.Table):
            h.update(x.schema.to_string().encode())
            for column in x.columns:
                add(column.combine_chunks().to_pylist())
        elif isinstance(x, tf.RaggedTensor):
            add(x.flat_values)
            add(x.nested_row_splits)
        elif isinstance(x, tf.SparseTensor):
            add([x.indices, x.values, x.dense_shape])
        elif isinstance(x, (tf.Tensor, tf.Variable, np.ndarray)):
            array = np.asarray(x)
            h.update(str(array.dtype).encode() + str(array.shape).encode())
            h.update(array.tobytes() if array.dtype != object else repr(array.tolist()).encode())
        elif isinstance(x, dict):
            for key in sorted(x):
                h.update(str(key).encode())
                add(x[key])
        elif isinstance(x, (list, tuple)) or hasattr(x, "_fields"):
            h.update(b"[")
            for item in x:
                add(item)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    add(value)
    return h.hexdigest()


def _read_iter_shards(directory: str, scratch: str) -> str:
    from sparse_io import iter_shards

    return _digest(list(iter_shards(directory)))


def _read_columnar(directory: str, scratch: str) -> str:
    from sparse_io.manifest import verify_directory
    from sparse_io.pins import pin_shards
    from transforms.tfdata.columnar.reader import ColumnarSource
    from transforms.tfdata.core.columns import select_columns
    from transforms.tfdata.core.files import list_files, read_schema, shard_format

    verify_directory(directory, "sizes")
    files = list_files(directory, (".parquet", ".arrow"))
    columns, label = select_columns(read_schema(directory), None, None)
    source = ColumnarSource(files, columns, label, 64, shuffle=False, seed=0, num_shards=1, index=0,
                            drop_remainder=False, shard_format=shard_format(files), pins=pin_shards(files, "sizes"))
    return _digest([source.read(i) for i in range(source.num_batches(1) or 0)])


def _read_make_dataset(directory: str, scratch: str) -> str:
    from transforms.tfdata.dataset import make_dataset

    return _digest(list(make_dataset(directory, 64, shuffle=False, output="ragged")))


def _read_train(directory: str, scratch: str) -> str:
    import tensorflow as tf

    from pipelines import train

    args = types.SimpleNamespace(batch_size=64, seed=7, steps=None, epochs=1, verify="sizes")
    task = types.SimpleNamespace(name="ctr", features=None, label=None)
    dropped = tf.Variable(0, dtype=tf.int64)
    dataset = train._dataset(args, task, directory, training=True, dropped=dropped)
    return _digest([list(dataset), dropped])


def _read_convert(directory: str, scratch: str) -> str:
    from pipelines.convert import convert_output
    from sparse_io import iter_shards

    target = os.path.join(scratch, "converted")
    shutil.rmtree(target, ignore_errors=True)
    fmt = "arrow" if "arrow" not in _formats_in(directory) else "parquet"
    convert_output(directory, target, fmt)
    try:
        return _digest(list(iter_shards(target)))
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _read_peer(directory: str, scratch: str) -> str:
    """The shards read by pyarrow or TensorFlow alone, without sparseflow's checks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sparse_io.formats import shard_format_of

    paths = sorted(os.path.join(directory, n) for n in os.listdir(directory) if shard_format_of(n))
    fmt = shard_format_of(paths[0])
    if fmt == "parquet":
        return _digest(pq.read_table(paths))
    if fmt == "arrow":
        return _digest([pa.ipc.open_file(p).read_all() for p in paths])
    import tensorflow as tf

    return _digest([r.numpy() for r in tf.data.TFRecordDataset(paths)])


class _Crashed(Exception):
    """The peer's child process died reading a flipped file."""


class _PeerProcess:
    """`_read_peer` in one child process, started again after a crash."""

    def __init__(self):
        self._pool = None

    def read(self, directory: str) -> str:
        import concurrent.futures
        import multiprocessing

        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return self._pool.submit(_read_peer, directory, "").result()
        except concurrent.futures.process.BrokenProcessPool:
            self.close()
            raise _Crashed() from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def _formats_in(directory: str) -> set[str]:
    from sparse_io.formats import shard_format_of

    return {f for f in map(shard_format_of, os.listdir(directory)) if f}


_READ: dict[str, Callable[[str, str], str]] = {
    "iter_shards": _read_iter_shards, "columnar": _read_columnar, "make_dataset": _read_make_dataset,
    "train": _read_train, "convert": _read_convert, "peer": _read_peer,
}


def _outcome(error: BaseException, name: str) -> str:
    """"refused" for an error that names the damage or the damaged file `name`, "unclear" for any other."""
    import tensorflow as tf

    from sparse_io.errors import CorruptFileError
    from sparse_io.manifest import ManifestError

    if isinstance(error, (CorruptFileError, ManifestError, tf.errors.DataLossError)):
        return "refused"
    message = error.message if isinstance(error, tf.errors.OpError) else str(error)
    if "CorruptFileError" in message or "ManifestError" in message or name in message:
        return "refused"
    return "unclear"


@contextlib.contextmanager
def _flipped(path: str, original: bytes, position: int, bit: int):
    # One byte written in place, never a truncation: a reader still winding down may hold the file
    # memory-mapped (Arrow), and a mapped file cut short is a bus error, not a read error.
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes([original[position] ^ (1 << bit)]))
    try:
        yield
    finally:
        with open(path, "r+b") as f:
            f.seek(position)
            f.write(original[position:position + 1])


def flip_campaign(directory: str, flips: int, seed: int, *, schedule=DEFAULT_SCHEDULE, peer: bool = False) -> dict:
    """Flips `flips` single bits in `directory`'s shards, one at a time, each read by one reader.

    The bit is drawn uniformly over all the shards' bytes. Flip i goes to the
    first reader of `schedule` ((reader, period) pairs) whose period divides
    i + 1, else to the cheap readers in turn. With `peer`, every flip is also
    read by `_read_peer` (pyarrow or TensorFlow alone), counted apart under
    "peer", any error there counting as refused.

    Returns {"counts": {outcome: n}, "by_reader": {reader: {outcome: n}},
    "silent": [first few silent flips: file, byte, bit, reader], "unclear":
    [first few: file, byte, bit, reader, error]}. The directory is left as
    it was.
    """
    from sparse_io.formats import shard_format_of

    shards = sorted(n for n in os.listdir(directory) if shard_format_of(n))
    cheap = list(CHEAP_READERS)
    if any(shard_format_of(n) == "tfrecord" for n in shards):  # train and the columnar reader: Parquet, Arrow
        schedule = [(r, p) for r, p in schedule if r != "train"]
        cheap.remove("columnar")
    readers = cheap + [r for r, _ in schedule]
    originals = {n: open(os.path.join(directory, n), "rb").read() for n in shards}
    scratch = tempfile.mkdtemp(prefix="flips-")
    rng = random.Random(seed)
    expected = {r: _READ[r](directory, scratch) for r in readers}
    peer_counts: collections.Counter = collections.Counter()
    peer_pool = _PeerProcess() if peer else None
    if peer_pool is not None:
        expected["peer"] = peer_pool.read(directory)
    counts: collections.Counter = collections.Counter()
    by_reader: dict[str, collections.Counter] = {r: collections.Counter() for r in readers}
    silent, unclear = [], []
    try:
        for i in range(flips):
            position, bit = rng.randrange(sum(len(b) for b in originals.values())), rng.randrange(8)
            for name in shards:  # the shard holding byte `position` of them all, end to end
                if position < len(originals[name]):
                    break
                position -= len(originals[name])
            reader = next((r for r, period in schedule if (i + 1) % period == 0), cheap[i % len(cheap)])
            with _flipped(os.path.join(directory, name), originals[name], position, bit):
                try:
                    found = _READ[reader](directory, scratch)
                    outcome = "same" if found == expected[reader] else "silent"
                except Exception as e:  # every error is classified; none may pass for data
                    outcome = _outcome(e, name)
                    if outcome == "unclear":
                        unclear.append({"file": name, "byte": position, "bit": bit, "reader": reader,
                                        "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"})
                if peer_pool is not None:
                    try:
                        found = peer_pool.read(directory)
                        peer_counts["same" if found == expected["peer"] else "silent"] += 1
                    except _Crashed:
                        peer_counts["crashed"] += 1
                    except Exception:  # any error: the peer did not pass damage off as data
                        peer_counts["refused"] += 1
            if outcome == "silent":
                silent.append({"file": name, "byte": position, "bit": bit, "reader": reader})
            counts[outcome] += 1
            by_reader[reader][outcome] += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if peer_pool is not None:
            peer_pool.close()
    return {
        "counts": {o: counts[o] for o in OUTCOMES},
        "by_reader": {r: {o: c[o] for o in OUTCOMES} for r, c in by_reader.items()},
        "silent": silent[:10],
        "unclear": unclear[:10],
        **({"peer": {o: peer_counts[o] for o in (*OUTCOMES, "crashed")}} if peer else {}),
    }


def run(quick: bool, flips: int | None = None, seed: int = 41) -> dict:
    """The campaign on each format: {"flips_per_format", "seed", "rows", "formats": {format: flip_campaign(...)}}."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    flips = flips if flips is not None else (12 if quick else 1500)  # quick: the harness runs, no figure
    root = tempfile.mkdtemp(prefix="reliability-")
    try:
        outputs = small_output(root)
        results = {fmt: flip_campaign(outputs[fmt], flips, seed + k, peer=True) for k, fmt in enumerate(FLIP_FORMATS)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"flips_per_format": flips, "seed": seed, "rows": 240, "formats": results}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--flips", type=int, default=None, help="flips per format")
    p.add_argument("--seed", type=int, default=41)
    args = p.parse_args()
    print(json.dumps(run(args.quick, args.flips, args.seed), indent=1))


if __name__ == "__main__":
    main()
