"""Raw log files as a `tf.data` source: text lines to batches of parsed columns, graph-native.

TextLineDataset -> numbered chunks of lines -> one regex check per line ->
bad lines counted and skipped, or an error naming file, line, field and rule
-> valid lines re-cut into batches of exactly `batch_size` -> split,
convert, hash (or look up). The batches are dicts of columns, which
`finish.column_batch` makes `RawBatch`es of, as for TFRecord shards.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf

from sparse_io.errors import CorruptFileError, LayoutError
from sparse_io.schema import Schema
from transforms.tfdata.core.epochs import (
    draw_seed,
    epoch_seed,
    file_order,
    over_epochs,
    plain,
    seed_in_state,
    seeded_shuffle,
)
from transforms.tfdata.core.options import BatchOptions
from transforms.tfdata.core.sharding import split_files
from transforms.tfdata.logs.parsing import LineParser
from transforms.tfdata.logs.rebatch import rebatch

__all__ = ["log_batches", "log_compression", "csv_layout"]

_COMPRESSION = {".gz": "GZIP", ".zz": "ZLIB"}


def log_batches(
    files: Sequence[str],
    parser: LineParser,
    keep: Sequence[str],
    id_maps: Mapping[str, Callable],
    batching: BatchOptions,
    *,
    derived: Mapping[str, Callable] | None = None,
    skips: Sequence[int],
    compression: str | None,
    shuffle: bool,
    seed: int | None,
    num_shards: int,
    index: int,
    on_error: str,
    bad_lines: tf.Variable | None,
    padded_lines: tf.Variable | None,
    lines_per_chunk: int | None,
) -> tf.data.Dataset:
    """Batches of the columns `keep` (ids mapped by `id_maps`) parsed from this worker's lines.

    Args:
      files: the log files.
      parser: checks and splits lines.
      keep: the columns to deliver.
      id_maps: feature -> function from its ragged ids to int64 (hashing or
        a vocabulary lookup), applied after parsing.
      batching: batch size, epochs, remainder, order, shuffle buffer.
      derived: new column -> function of all the parsed raw columns (a
        cross: `transforms.tfdata.crosses.GraphCross` with its `spec.sources`),
        computed before any id map runs.
      skips: header lines to skip at the start of each file (one per file).
      compression: "GZIP", "ZLIB" or None (see `log_compression`).
      shuffle: permute the files each epoch, and lines through a buffer of
        `batching.shuffle_buffer` per file.
      seed: the shuffle's seed (when None and shuffling, one is drawn here
        and kept in the iterator's state, so a checkpoint restores the same
        order: `seed_in_state`, or `file_order` with one epoch).
      num_shards: the number of workers.
      index: this worker, in `[0, num_shards)`. Workers get whole files when
        each can get a non-empty one, else every n-th line of every file.
      on_error: "raise" (an InvalidArgumentError naming the first bad line)
        or "skip" (bad lines counted in `bad_lines`).
      bad_lines: an int64 scalar `tf.Variable` that counts skipped lines;
        required with on_error="skip", unused otherwise.
      padded_lines: counts lines read with missing trailing fields, or None.
      lines_per_chunk: lines checked per step (default max(batch_size, 4096)).

    With `batching.num_epochs == 1` the first source dataset is the list of
    files (`file_order`), so the tf.data service can split the epoch
    between its workers by files; with more epochs it is the range of
    epochs (`over_epochs`).

    Raises:
      CorruptFileError: a compressed file of this worker is truncated or damaged.
    """
    sizes = [tf.io.gfile.stat(f).length for f in files]
    mine = split_files([s > 0 for s in sizes], num_shards, index)
    chosen = list(range(len(files))) if mine is None else mine
    if compression is not None:
        for f in chosen:
            _check_stream_end(files[f], compression)
    chunk = lines_per_chunk or max(batching.batch_size, 4096)

    def check(path, numbers, text):
        """The valid lines of a chunk; bad ones counted (or an error naming the first)."""
        text = tf.strings.regex_replace(text, "\r$", "")
        ok, padded = parser.validate(text)
        effects = []
        if on_error == "raise":
            effects.append(_raise_on_bad(ok, path, numbers, text, parser))
        else:
            effects.append(bad_lines.assign_add(tf.reduce_sum(tf.cast(tf.logical_not(ok), tf.int64))))
        if padded_lines is not None:
            effects.append(padded_lines.assign_add(tf.reduce_sum(tf.cast(padded, tf.int64))))
        with tf.control_dependencies(effects):
            return {"line": tf.boolean_mask(text, ok)}

    def parse(batch):
        """Columns of a batch of valid lines (hashed or looked up)."""
        cols = parser.columns(parser.split(batch["line"])[0])
        out = {k: cols[k] for k in keep}
        for name, cross in (derived or {}).items():  # from the raw values, as the ingest crosses them
            out[name] = cross([cols[source] for source in cross.spec.sources])
        for name, fn in id_maps.items():
            out[name] = fn(out[name])
        return out

    def one_epoch(seed: int | tf.Tensor | None, epoch: int | tf.Tensor) -> tf.data.Dataset:
        def numbered_chunks(file_seed, path, skip, number):
            lines = tf.data.TextLineDataset(path, compression_type=compression)
            numbered = lines.skip(skip).enumerate(start=skip + 1)
            if mine is None:
                numbered = numbered.shard(num_shards, index)
            if shuffle:
                # One seed per (epoch, file): files do not share a permutation pattern. The seed comes
                # with the file, so an iterator restored in another process keeps the one it was saved with.
                numbered = seeded_shuffle(numbered, batching.shuffle_buffer, epoch_seed(file_seed, epoch, 2 + number))
            return numbered.batch(chunk).map(plain(lambda numbers, text: (path, numbers, text)))

        paths = tf.constant([files[f] for f in chosen])
        header_lines = tf.constant([skips[f] for f in chosen], tf.int64)
        numbers = tf.constant(chosen, tf.int64)

        def file_at(file_seed, k):
            return file_seed, tf.gather(paths, k), tf.gather(header_lines, k), tf.gather(numbers, k)

        # The files lead the pipeline (file_order), permuted without a buffer that would pull them all at once.
        order = file_order(len(chosen), seed if shuffle else None, epoch)
        chunks = order.map(plain(file_at)).interleave(
            plain(numbered_chunks),
            # Unshuffled input is read file after file, in name order.
            cycle_length=min(len(chosen), 4) if shuffle else 1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=batching.deterministic,
        )
        valid = chunks.map(plain(check), num_parallel_calls=tf.data.AUTOTUNE, deterministic=batching.deterministic)
        # Lines are re-cut into exact batches before parsing: one string column to carry, not forty.
        lines = rebatch(valid, batching.batch_size, drop_remainder=batching.drop_remainder)
        return lines.map(plain(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=batching.deterministic)

    if batching.num_epochs == 1:
        # No epoch loop: the files lead the pipeline, so the tf.data service can split the epoch by files.
        return one_epoch(draw_seed() if shuffle and seed is None else seed, 0)

    def epochs(seed: int | tf.Tensor | None) -> tf.data.Dataset:
        return over_epochs(batching.num_epochs, lambda epoch: one_epoch(seed, epoch))

    return seed_in_state(draw_seed(), epochs) if shuffle and seed is None else epochs(seed)


def _raise_on_bad(ok, path, numbers, text, parser: LineParser) -> tf.Tensor:
    def fail():
        first = tf.argmin(tf.cast(ok, tf.int32))
        message = tf.strings.join(
            [
                path,
                ":",
                tf.strings.as_string(numbers[first]),
                ": bad line: ",
                parser.explain(text[first]),
                " (line: '",
                tf.strings.substr(text[first], 0, 200),
                "')",
            ]
        )
        check = tf.debugging.Assert(tf.constant(False), [message], summarize=1)
        with tf.control_dependencies([check]):
            return tf.constant(False)

    return tf.cond(tf.reduce_all(ok), lambda: tf.constant(True), fail)


def log_compression(files: Sequence[str]) -> str | None:
    """The `TextLineDataset` compression of `files`: "GZIP" (.gz), "ZLIB" (.zz) or None (plain).

    Raises:
      ValueError: no files, a mix of compressed and plain files (or of .gz
        and .zz), or .zst/.zstd/.bz2 files, which tf.data cannot read.

    Example:
      >>> log_compression(["day_0.gz", "day_1.gz"])
      'GZIP'
    """
    if not files:
        raise ValueError("no log files to read")
    kinds = {_COMPRESSION.get(os.path.splitext(f)[1].lower()) for f in files}
    if len(kinds) > 1:
        raise ValueError("the input mixes compressed and plain files; read them as separate datasets")
    kind = kinds.pop()
    if any(f.endswith((".zst", ".zstd", ".bz2")) for f in files):
        raise ValueError("tf.data reads plain, .gz and .zz text only; decompress .zst/.bz2 logs first")
    return kind


_CHECK_BYTES = 1 << 20


def _check_stream_end(path: str, compression: str) -> None:
    """Decompresses `path` once, output discarded, to find its end marker.

    TensorFlow's compressed line reader ends quietly where a cut file ends,
    so without this a truncated .gz log reads as a shorter log. The pass
    costs one decompression of the worker's files when the dataset is made
    (not every epoch); output is bounded to `_CHECK_BYTES` a step.

    Raises:
      CorruptFileError: the stream is truncated or damaged.
    """
    gzip_wbits, zlib_wbits = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS
    wbits = gzip_wbits if compression == "GZIP" else zlib_wbits
    decompressor, read = zlib.decompressobj(wbits), 0
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            while True:
                data = f.read(_CHECK_BYTES)
                if not data:
                    break
                read += len(data)
                while data:
                    decompressor.decompress(data, _CHECK_BYTES)
                    data = decompressor.unconsumed_tail
                    if decompressor.eof and decompressor.unused_data:
                        if compression != "GZIP":
                            raise CorruptFileError(path, f"damaged zlib stream: data after its end at byte {read}")
                        data = decompressor.unused_data  # the next gzip member
                        decompressor = zlib.decompressobj(wbits)
    except zlib.error as e:
        raise CorruptFileError(
            path, f"damaged {compression.lower()} stream: {e} (within the first {read:,} bytes)"
        ) from None
    if read and not decompressor.eof:
        raise CorruptFileError(
            path, f"truncated {compression.lower()} stream: it ends at byte {read:,} before its end-of-stream marker"
        )


def _first_line(path: str, compression: str | None) -> str:
    if compression == "ZLIB":
        raise ValueError(f"{path}: give header=True or False for zlib-compressed CSV")
    with tf.io.gfile.GFile(path, "rb") as f:
        line = gzip.GzipFile(fileobj=f).readline() if compression == "GZIP" else f.readline()
    return line.decode("utf-8", errors="replace").rstrip("\r\n")


def csv_layout(files, schema: Schema, delimiter: str, header: bool | None, compression):
    """Column names in field order and header lines to skip per file."""
    needed = schema.arrow_schema().names
    layouts = []
    for path in files:
        first = [c.strip().strip('"') for c in _first_line(path, compression).split(delimiter)]
        has_header = header if header is not None else all(n in first for n in needed)
        if has_header:
            missing = [n for n in needed if n not in first]
            if missing:
                raise LayoutError(path, f"the header lacks column(s) {missing}; it has {first}")
        layouts.append(tuple(first) if has_header else None)
    headers = {layout for layout in layouts if layout is not None}
    if len(headers) > 1:
        raise ValueError("the CSV files have different headers; read them as separate datasets")
    names = list(headers.pop()) if headers else needed
    return names, [1 if layout is not None else 0 for layout in layouts]
