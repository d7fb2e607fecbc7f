"""`make_log_dataset`: raw Criteo/CSV/TSV logs straight into training batches, graph-native.

TextLineDataset -> numbered chunks of lines -> one regex check per line ->
bad lines counted and skipped, or an error naming file, line, field and rule
-> valid lines re-cut into batches of exactly `batch_size` -> split,
convert, hash (or look up) -> the same `(features, label)` elements as
`make_dataset`.
No Python runs per batch, so it works inside the tf.data service (when the
bad-line counter is not used: a dataset that captures a variable cannot be
sent to the service).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Mapping, Sequence

import tensorflow as tf

from sparse_io.errors import CorruptFileError
from sparse_io.readers import LOG_FORMATS, csv_options
from sparse_io.schema import Schema, criteo_schema
from transforms.tfdata.columns import Column, select_columns
from transforms.tfdata.epochs import draw_seed, epoch_seed, over_epochs, plain, seeded_shuffle
from transforms.tfdata.finish import column_batch, finish_batches
from transforms.tfdata.ids import hash_ids, lookup_ids, vocabulary_table
from transforms.tfdata.log_parsing import LineFormat, LineParser
from transforms.tfdata.options import BatchOptions, OutputOptions
from transforms.tfdata.paths import list_files
from transforms.tfdata.rebatch import rebatch
from transforms.tfdata.sharding import resolve_worker, split_files

__all__ = ["make_log_dataset", "TEXT_FORMATS", "FORMATS"]

# The text formats of `sparse_io.LOG_FORMATS` (JSON Lines and Parquet need the Beam ingest).
TEXT_FORMATS = tuple(f for f in LOG_FORMATS if f in ("criteo", "csv", "tsv"))
FORMATS = TEXT_FORMATS
_COMPRESSION = {".gz": "GZIP", ".zz": "ZLIB"}


def make_log_dataset(
    pattern: str | Sequence[str],
    format: str,
    batch_size: int,
    *,
    schema: Schema | None = None,
    hash_bins: int | Mapping[str, int] | None = None,
    salt: int | Sequence[int] | None = None,
    vocabularies: Mapping[str, str | Sequence[str]] | None = None,
    num_oov_indices: int = 1,
    features: Sequence[str] | None = None,
    label: str | None | bool = None,
    shuffle: bool = False,
    seed: int | None = None,
    shuffle_buffer: int = 16384,
    num_epochs: int | None = 1,
    input_context: tf.distribute.InputContext | None = None,
    num_shards: int | None = None,
    index: int | None = None,
    output: str = "coo",
    drop_remainder: bool = False,
    deterministic: bool = True,
    capacities=None,
    combiner: str | Mapping[str, str] = "sum",
    overflow: str = "error",
    dropped: tf.Variable | None = None,
    on_error: str = "raise",
    bad_lines: tf.Variable | None = None,
    padded_lines: tf.Variable | None = None,
    strict: bool = False,
    delimiter: str | None = None,
    list_separator: str = "|",
    header: bool | None = None,
    lines_per_chunk: int | None = None,
    null_values: Sequence[str] | None = None,
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of `(features, label)` batches parsed from raw log lines.

    Args:
      pattern: a glob pattern, a directory or a list of text files (plain,
        or `.gz`).
      format: "criteo" (headerless TSV: label, I1..I13, C1..C26 as 8-digit
        hex; lines short of trailing fields are padded with missing values
        unless `strict`), "csv" (one column per schema column, by header
        when there is one; lists joined by `list_separator`) or "tsv" (the
        same with a tab).
      batch_size: rows per batch, exact even when bad lines are skipped.
      schema: the columns (default for "criteo": `criteo_schema()`; required
        for "csv").
      hash_bins: buckets for string ids (and integer ids named here): an int
        for every sparse string feature, or a dict feature -> bins. Buckets
        equal `keras.layers.Hashing(bins, salt=salt)` and the Beam `HashIds`.
      salt: see `hash_ids`.
      vocabularies: feature -> vocabulary file (one token a line, as the Beam
        `ComputeVocabulary` writes) or token list; indices equal
        `keras.layers.StringLookup(vocabulary, num_oov_indices=...)`.
      features, label, shuffle, seed, num_epochs, input_context, num_shards,
      index, output, drop_remainder, deterministic, capacities, combiner,
      overflow, dropped: as in `make_dataset`. Shuffling permutes the files
      every epoch and lines through a `shuffle_buffer` per file. Sharding
      gives workers whole files when each can get one, else every n-th line
      of every file. `capacities` must be given explicitly (no stats.json).
      on_error: "raise" (InvalidArgumentError naming the file, line number,
        field and rule of the first bad line) or "skip" (bad lines are left
        out and counted in `bad_lines`, which is then required).
      bad_lines: an int64 scalar `tf.Variable` that counts skipped lines.
      padded_lines: an optional int64 `tf.Variable` counting Criteo lines
        read with missing trailing fields.
      strict: "criteo": a short line is bad instead of padded.
      delimiter: field delimiter (default tab for criteo and tsv, comma for
        csv; any one character for csv).
      list_separator: between the ids of a CSV list field.
      header: CSV: True/False, or None to detect it (a first line naming
        every schema column).
      lines_per_chunk: lines parsed per step (default max(batch_size, 4096)).
      null_values: csv/tsv: whole fields that mean missing (default `[""]`,
        e.g. `["", "NA", "NULL"]`): an empty id list, a NaN dense value.

    Returns:
      The dataset, with the structure `make_dataset` gives for the same
      schema after hashing (sparse ids int64).

    Raises:
      ValueError: bad arguments, no files, a string feature with neither
        hash bins nor a vocabulary, CSV headers that differ between files or
        lack a column, or on_error="skip" without a counter.
      CorruptFileError: a `.gz`/`.zz` file of this worker is truncated or
        damaged (each is decompressed once here to find its end marker,
        since TensorFlow's reader would stop quietly where a cut file ends).
      tf.errors.InvalidArgumentError: at run time, a bad line with
        on_error="raise".

    Example:
      >>> bad = tf.Variable(0, dtype=tf.int64)
      >>> ds = make_log_dataset("day_0*.tsv", "criteo", 4096, hash_bins=1 << 20,
      ...                       on_error="skip", bad_lines=bad)  # doctest: +SKIP
    """
    if format not in TEXT_FORMATS:
        raise ValueError(f"format must be one of {TEXT_FORMATS}, got {format!r}")
    batching = BatchOptions(batch_size, num_epochs, drop_remainder, deterministic, shuffle_buffer)
    outputs = OutputOptions(output, combiner, capacities, overflow, dropped=dropped)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    for what, var in (("bad_lines", bad_lines), ("padded_lines", padded_lines)):
        if var is not None and (not isinstance(var, tf.Variable) or var.dtype != tf.int64 or var.shape.rank != 0):
            raise ValueError(f"{what} must be an int64 scalar tf.Variable")
    if on_error == "skip" and bad_lines is None:
        raise ValueError(
            "on_error='skip' needs bad_lines=tf.Variable(0, dtype=tf.int64): skipped lines are always counted"
        )
    if isinstance(capacities, str):
        raise ValueError("capacities: raw logs have no stats.json; give a dict feature -> capacity")
    if schema is None:
        if format != "criteo":
            raise ValueError(f"format={format!r} needs a schema")
        schema = criteo_schema()
    timed = [f.name for f in schema if f.time_unit is not None]
    if timed:
        raise ValueError(f"timestamp column(s) {timed}: ISO-8601 text is parsed by the Beam ingest "
                         "(python -m pipelines.ingest), not in the graph; read its shards with make_dataset")
    files = list_files(pattern)
    compression = _compression(files)
    if format == "criteo":
        if null_values is not None:
            raise ValueError("null_values apply to 'csv' and 'tsv', not 'criteo'")
        layout_delimiter, nulls = delimiter or "\t", ("",)
    else:
        layout = csv_options(format, delimiter, None, null_values, None, list_separator)
        layout_delimiter, nulls = layout.delimiter, layout.null_values
    fmt = LineFormat(
        delimiter=layout_delimiter,
        list_separator=list_separator,
        pad_short=format == "criteo" and not strict,
        hex32=format == "criteo",
        quotes=format != "criteo",
        null_values=nulls,
    )
    if format == "criteo":
        file_columns, skips = schema.arrow_schema().names, [0] * len(files)
    else:
        file_columns, skips = _csv_layout(files, schema, fmt.delimiter, header, compression)
    parser = LineParser(schema, file_columns, fmt)

    columns, label_column = select_columns(schema, features, label)
    id_maps = _id_maps(schema, columns, hash_bins, salt, vocabularies, num_oov_indices)
    out_columns = [
        Column(c.name, c.kind, "int64" if c.is_sparse and c.name in id_maps else c.dtype, c.weighted) for c in columns
    ]
    for c in out_columns:
        if c.is_sparse and c.dtype == "string" and output == "coo":
            raise ValueError(f"feature {c.name!r}: string ids need hash_bins or a vocabulary for output='coo'")
    keep = [c.name for c in columns] + [c.weights_name for c in columns if c.is_sparse and c.weighted]
    if label_column is not None:
        keep.append(label_column.name)

    shards, worker = resolve_worker(input_context, num_shards, index)
    sizes = [tf.io.gfile.stat(f).length for f in files]
    mine = split_files([s > 0 for s in sizes], shards, worker)
    chosen = list(range(len(files))) if mine is None else mine
    if compression is not None:
        for f in chosen:
            _check_stream_end(files[f], compression)
    chunk = lines_per_chunk or max(batch_size, 4096)

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
        for name, fn in id_maps.items():
            out[name] = fn(out[name])
        return out

    if shuffle and seed is None:
        seed = draw_seed()

    def one_epoch(epoch: tf.Tensor) -> tf.data.Dataset:
        def numbered_chunks(path, skip, number):
            lines = tf.data.TextLineDataset(path, compression_type=compression)
            numbered = lines.skip(skip).enumerate(start=skip + 1)
            if mine is None:
                numbered = numbered.shard(shards, worker)
            if shuffle:
                # One seed per (epoch, file): files do not share a permutation pattern.
                numbered = seeded_shuffle(numbered, shuffle_buffer, epoch_seed(seed, epoch, 2 + number))
            return numbered.batch(chunk).map(plain(lambda numbers, text: (path, numbers, text)))

        paths = tf.data.Dataset.from_tensor_slices(
            (
                [files[f] for f in chosen],
                tf.constant([skips[f] for f in chosen], tf.int64),
                tf.constant(chosen, tf.int64),
            )
        )
        if shuffle and len(chosen) > 1:
            paths = seeded_shuffle(paths, len(chosen), epoch_seed(seed, epoch, 0))
        chunks = paths.interleave(
            plain(numbered_chunks),
            # Unshuffled input is read file after file, in name order.
            cycle_length=min(len(chosen), 4) if shuffle else 1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        valid = chunks.map(plain(check), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
        # Lines are re-cut into exact batches before parsing: one string column to carry, not forty.
        lines = rebatch(valid, batch_size, drop_remainder=drop_remainder)
        return lines.map(plain(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)

    batches = over_epochs(num_epochs, one_epoch)
    out = finish_batches(
        batches,
        column_batch(out_columns, label_column, outputs.combiners(out_columns)),
        out_columns,
        batching,
        outputs,
        capacities=outputs.capacities_for(out_columns, batch_size),
        has_label=label_column is not None,
    )
    options = tf.data.Options()
    options.deterministic = deterministic
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return out.with_options(options)


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


def _compression(files: Sequence[str]) -> str | None:
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


def _csv_layout(files, schema: Schema, delimiter: str, header: bool | None, compression):
    """Column names in field order and header lines to skip per file."""
    needed = schema.arrow_schema().names
    layouts = []
    for path in files:
        first = [c.strip().strip('"') for c in _first_line(path, compression).split(delimiter)]
        has_header = header if header is not None else all(n in first for n in needed)
        if has_header:
            missing = [n for n in needed if n not in first]
            if missing:
                raise ValueError(f"{path}: the header lacks column(s) {missing}; it has {first}")
        layouts.append(tuple(first) if has_header else None)
    headers = {layout for layout in layouts if layout is not None}
    if len(headers) > 1:
        raise ValueError("the CSV files have different headers; read them as separate datasets")
    names = list(headers.pop()) if headers else needed
    return names, [1 if layout is not None else 0 for layout in layouts]


def _id_maps(schema, columns: Sequence[Column], hash_bins, salt, vocabularies, num_oov_indices) -> dict:
    """feature -> function mapping its ragged ids to int64 (hash or vocabulary)."""
    vocabularies = dict(vocabularies or {})
    if isinstance(hash_bins, Mapping):
        bins = dict(hash_bins)
    elif hash_bins is None:
        bins = {}
    else:
        bins = {c.name: hash_bins for c in columns if c.is_sparse and c.dtype == "string"}
    sparse = {c.name for c in columns if c.is_sparse}
    unknown = sorted((set(bins) | set(vocabularies)) - sparse)
    if unknown:
        raise ValueError(f"hash_bins/vocabularies name feature(s) that are not sparse features read: {unknown}")
    both = sorted(set(bins) & set(vocabularies))
    if both:
        raise ValueError(f"feature(s) {both} have both hash_bins and a vocabulary; choose one")
    maps = {}
    for name, n in bins.items():
        maps[name] = lambda ids, n=n: hash_ids(ids, n, salt)
    for name, vocabulary in vocabularies.items():
        table = vocabulary_table(vocabulary)
        maps[name] = lambda ids, table=table: lookup_ids(ids, table, num_oov_indices)
    return maps
