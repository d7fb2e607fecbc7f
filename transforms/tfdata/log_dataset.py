"""`make_log_dataset`: raw Criteo/CSV/TSV logs straight into training batches, graph-native.

The lines are read, checked, batched and parsed by `logs.source`, then
finished as every source is (`finish`): the same `(features, label)`
elements as `make_dataset`.
No Python runs per batch, so it works inside the tf.data service
(`transforms.distribute`), without the counters: a service worker updates its
own copy of a `bad_lines`, `padded_lines` or `dropped` variable, so yours
would stay 0, and `distribute` refuses them. With `num_epochs=1` the
pipeline starts from the list of files, so the service can split the epoch
between its workers by files (`processing_mode="distributed_epoch"`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

from sparse_io.crosses import CrossSpec
from sparse_io.formats import LOG_FORMATS
from sparse_io.id_maps import HashSpec, VocabularySpec, vocabulary_tokens
from sparse_io.numeric_maps import DerivedFeature
from sparse_io.readers import csv_options
from sparse_io.readers.criteo import check_criteo_schema
from sparse_io.schema import Schema, criteo_schema
from transforms.tfdata.core.columns import Column, select_columns
from transforms.tfdata.core.files import list_files
from transforms.tfdata.core.finish import column_batch, finish_batches
from transforms.tfdata.core.options import BatchOptions, OutputOptions, check_counter
from transforms.tfdata.core.sharding import resolve_worker
from transforms.tfdata.crosses import GraphCross
from transforms.tfdata.ids import GraphIdMap
from transforms.tfdata.logs.parsing import LineFormat, LineParser
from transforms.tfdata.logs.source import csv_layout, log_batches, log_compression
from transforms.tfdata.numeric import derived_columns
from transforms.tfdata.service import remember

__all__ = ["make_log_dataset", "TEXT_FORMATS"]

# The text formats of `sparse_io.LOG_FORMATS` (JSON Lines and Parquet need the Beam ingest).
TEXT_FORMATS = tuple(f for f in LOG_FORMATS if f in ("criteo", "csv", "tsv"))


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
    crosses: Mapping[str, CrossSpec] | None = None,
    derived: Sequence[DerivedFeature] | None = None,
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
        for "csv" and "tsv"). A "criteo" schema's sparse features must be
        unweighted string features (hex ids), as the Beam reader requires.
      hash_bins: buckets for string ids (and integer ids named here): an int
        for every sparse string feature, or a dict feature -> bins. Buckets
        equal `keras.layers.Hashing(bins, salt=salt)` and the Beam `HashIds`.
      salt: see `transforms.tfdata.ids.hash_ids`.
      vocabularies: feature -> vocabulary file (one token a line, as the Beam
        `ComputeVocabulary` writes) or token list; indices equal
        `keras.layers.StringLookup(vocabulary, num_oov_indices=...)`.
      num_oov_indices: k, the out-of-vocabulary indices before each
        vocabulary's tokens (default 1): the token on line i gets i + k, an
        unknown token 0 (k == 1) or a bucket in `[0, k)`: `id mod k` for
        integer ids, the FarmHash bucket of a string (the ingest's rules,
        `sparse_io.id_maps.VocabularySpec`). A positive int (used only with
        `vocabularies`).
      features: feature names to deliver (default: every non-label feature
        of the schema); `hash_bins` and `vocabularies` may name only sparse
        features among them.
      label: the label column (default: the schema's label), or False for
        elements that are the features dict alone.
      shuffle: permute the files every epoch, read up to four at once, and
        the lines of each through a buffer of `shuffle_buffer` lines. The
        default (False) reads the files one after another in name order,
        each line in turn.
      seed: makes the shuffle reproducible. None: a fresh seed each time the
        dataset is made, kept in the iterator's state, so an iterator saved
        with `tf.train.Checkpoint(iterator=...)` and restored in a new
        process goes on in exactly the order it was reading.
      shuffle_buffer: lines in each file's shuffle buffer (default 16384), a
        positive int.
      num_epochs: passes over the lines (None: endlessly). Each epoch ends
        with its own partial batch unless `drop_remainder`.
      input_context: a `tf.distribute.InputContext` (from
        `distribute_datasets_from_function`); or give `num_shards` and
        `index`. Each worker reads a disjoint part: whole files when every
        worker can get a non-empty one, else every n-th line of every file.
        The lines are not counted beforehand, so a worker of a log with
        fewer lines than workers gets an empty dataset, not an error.
      num_shards: the number of input workers, a positive int, given with
        `index` instead of `input_context` (default: one worker reading
        everything). Giving only one of the two, or both with
        `input_context`, raises ValueError.
      index: this worker's number, in `[0, num_shards)`.
      output: "coo", "ragged" or "sparse", as in `make_dataset`. String ids
        need `hash_bins` or a vocabulary for "coo"; "ragged" and "sparse"
        deliver the ones without either as strings.
      drop_remainder: drop each epoch's last partial batch; every shape is
        then static (with `capacities`, COO lengths too).
      deterministic: allow tf.data to reorder batches for speed when False.
      capacities: pad every COO feature to a static length (output="coo"
        only): a dict feature -> int, or a stats.json dict (its "max"
        capacities for `batch_size`). A string raises ValueError: raw logs
        have no stats.json beside them to read.
      combiner: "sum" (the default), "mean", "sqrtn", or a dict feature ->
        combiner (features not in it: "sum"), as in `make_dataset`.
      overflow: "error" (the default) or "drop", for a batch that needs
        more COO entries for a feature than its capacity, as in
        `make_dataset`.
      dropped: an int64 scalar `tf.Variable` that each batch adds its
        dropped COO entries to (overflow="drop" with `capacities`), as in
        `make_dataset`; None (the default) counts nothing.
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
      crosses: new sparse features, name -> `sparse_io.crosses.CrossSpec`:
        `keras.layers.HashedCrossing`'s int64 ids of the raw values of its
        sources (schema columns, crossed before their own hashing or lookup),
        as the ingest's `cross` features (`transforms.tfdata.crosses.GraphCross`).
      derived: features bucketized or scaled from a dense column, as an
        ingest made them (`sparse_io.numeric_maps.derived_features` of its
        schema.json): each is delivered under its name (one-id sparse int64,
        or dense float32), computed by the ingest's spec; `features` may
        name them.

    Returns:
      The dataset, with the structure `make_dataset` gives for the same
      schema: sparse ids mapped by `hash_bins` or a vocabulary are int64;
      the others keep the schema's dtype (an int32 feature's ids are int32,
      as from `make_dataset`; string ids stay strings with "ragged" or
      "sparse").

    Raises:
      ValueError: bad arguments, no files, a string feature with neither
        hash bins nor a vocabulary (output="coo"), a timestamp column (the
        Beam ingest parses those), CSV headers that differ between files or
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
    check_counter(bad_lines, "bad_lines")
    check_counter(padded_lines, "padded_lines")
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
    elif format == "criteo":
        check_criteo_schema(schema)  # the rule the Beam reader applies to the same logs
    timed = [f.name for f in schema if f.time_unit is not None]
    if timed:
        raise ValueError(f"timestamp column(s) {timed}: ISO-8601 text is parsed by the Beam ingest "
                         "(python -m pipelines.ingest), not in the graph; read its shards with make_dataset")
    files = list_files(pattern)
    compression = log_compression(files)
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
        file_columns, skips = csv_layout(files, schema, fmt.delimiter, header, compression)
    parser = LineParser(schema, file_columns, fmt)

    features, sources, derived_out, add_derived = derived_columns(derived or (), schema, features)
    columns, label_column = select_columns(schema, features, label)
    id_maps = _id_maps(schema, columns, hash_bins, salt, vocabularies, num_oov_indices)
    crossed = _crosses(schema, crosses or {})
    out_columns = [
        Column(c.name, c.kind, "int64" if c.is_sparse and c.name in id_maps else c.dtype, c.weighted) for c in columns
    ] + [Column(name, "sparse", "int64", False) for name in crossed] + derived_out
    for c in out_columns:
        if c.is_sparse and c.dtype == "string" and output == "coo":
            raise ValueError(f"feature {c.name!r}: string ids need hash_bins or a vocabulary for output='coo'")
    keep = [c.name for c in columns] + [c.weights_name for c in columns if c.is_sparse and c.weighted]
    keep += [name for name in sources if name not in keep]
    if label_column is not None:
        keep.append(label_column.name)

    shards, worker = resolve_worker(input_context, num_shards, index)
    batches = log_batches(
        files,
        parser,
        keep,
        id_maps,
        batching,
        derived=crossed,
        skips=skips,
        compression=compression,
        shuffle=shuffle,
        seed=seed,
        num_shards=shards,
        index=worker,
        on_error=on_error,
        bad_lines=bad_lines,
        padded_lines=padded_lines,
        lines_per_chunk=lines_per_chunk,
    )
    to_raw = column_batch(out_columns, label_column, outputs.combiners(out_columns))
    out = finish_batches(
        batches,
        (lambda raw: to_raw(add_derived(raw))) if derived else to_raw,
        out_columns,
        batching,
        outputs,
        capacities=outputs.capacities_for(out_columns, batch_size),
        has_label=label_column is not None,
    )
    # transforms.distribute refuses the counters (under the service they would stay 0), and
    # splitting by files where the epochs, not the files, lead the pipeline.
    counters = {"bad_lines": bad_lines, "padded_lines": padded_lines, "dropped": dropped}
    return remember(out, "log", counters, num_epochs=num_epochs)


def _id_maps(schema, columns: Sequence[Column], hash_bins, salt, vocabularies, num_oov_indices) -> dict:
    """Feature -> function mapping its ragged ids to int64 (hash or vocabulary)."""
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
    # The ingest's own specs (sparse_io.id_maps), run by their graph side: a value gets the id the Beam ingest gives it.
    maps = {name: GraphIdMap(HashSpec(n, salt)) for name, n in bins.items()}
    for name, vocabulary in vocabularies.items():
        tokens = vocabulary_tokens(tf.io.gfile.GFile(vocabulary, "rb").read()) if isinstance(vocabulary, str) else (
            vocabulary)
        if isinstance(num_oov_indices, bool) or not isinstance(num_oov_indices, int) or num_oov_indices < 1:
            raise ValueError(f"num_oov_indices must be a positive integer, got {num_oov_indices!r}")
        if not tokens:
            raise ValueError(f"feature {name!r}: vocabulary is empty")
        maps[name] = GraphIdMap(VocabularySpec(tuple(tokens), num_oov_indices))
    return maps


def _crosses(schema: Schema, crosses: Mapping[str, CrossSpec]) -> dict:
    """Each cross's `GraphCross`, by name, its sources checked against the schema.

    Raises:
      ValueError: not a CrossSpec, a name that is a schema column, or a source that is not one.
    """
    out = {}
    for name, spec in crosses.items():
        if not isinstance(spec, CrossSpec):
            raise ValueError(f"crosses[{name!r}]: not a CrossSpec: {spec!r}")
        if name in schema:
            raise ValueError(f"crosses[{name!r}]: {name!r} is already a column of the schema")
        unknown = [column for column in spec.sources if column not in schema]
        if unknown:
            raise ValueError(f"crosses[{name!r}]: source {unknown[0]!r} is not a column of the schema")
        out[name] = GraphCross(spec)
    return out
