r"""The ingest configuration file (YAML or JSON), validated key by key.

A config names what to read, how each sparse feature becomes integer ids
(hashing or a vocabulary), optional user-history grouping, and how shards
and statistics are written. Unknown keys and wrong types are errors that name
the key path (for example ``output.num_shards``), so a typo never silently
falls back to a default.

Example (Criteo, with comments, as accepted by `load_config`)::

    input:
      format: criteo          # criteo | csv | tsv | jsonl | parquet (sparse_io.LOG_FORMATS)
      max_line_bytes: 16777216  # a longer line is a dead letter (default 16 MiB)
      schema: criteo          # "criteo", or a list of feature specs, e.g.
      #   {name: ts, kind: dense, dtype: timestamp, unit: ms}   (int64 ms; unix numbers or ISO-8601)
      #   {name: rating, kind: label, dtype: int64, label_type: integer}  (default for ints: binary 0/1)
      # csv/tsv only: delimiter: ";" (any one character; "\t" a tab), quote_char: "'",
      # null_values: ["", "NA", "NULL", "\N"] (cells that mean missing; a feature spec
      # may carry its own null_values list); a spec may say where its values lie
      # (pipelines.config_columns): column: "user_id:token"; columns: {name: his_cate}
      # or {first: 17, count: 50} with padding: "0" and mask: {name: m}; a label
      # from: rating with at_least: 4 or in: [4, 5]
      # encoding: latin-1      # text formats: any Python codec (default utf-8)
    features:
      "C*": {hash_buckets: 1000000}         # glob over sparse feature names
      C9: {vocabulary: {min_frequency: 1}}  # exact names win over globs
      # C10: {vocabulary: {shared: cats}}   # one vocab/cats.txt, one id space (pipelines.config_shared)
      # C1_x_C2: {cross: [C1, C2], hash_buckets: 100000}  # a new feature (pipelines.config_crosses)
      I1_bucket: {source: I1, bucketize: {quantiles: 10}}  # derived features (pipelines.config_derived):
      I2_z: {source: I2, scale: z_score}                   # bucketize / scale a dense column at ingest
    output:
      format: parquet         # parquet | tfrecord | arrow (memory-mapped, for many epochs)
      num_shards: 4           # default: one shard per 128 MiB of log text; at most 10,000
      row_group_size: 65536   # Parquet row group / Arrow record batch
      write_threads: 2        # shards a worker encodes at once; default: its CPUs, at most 4
      compression: zstd       # Parquet: zstd | lz4 | snappy | none; Arrow: none | lz4 | zstd
      shuffle: true
      seed: 0
      derived: at_read        # at_read (Parquet, Arrow) | stored: quantile buckets, z_score and min_max
                              # computed by readers from schema.json's parameters, or written in the shards
    stats:
      batch_sizes: [1024, 4096]
    error_budget: 0.0         # fraction of bad records tolerated
    vocab_from: out/train     # optional: reuse that ingest's vocabularies and hash settings
    join:                     # optional: side tables' columns added to each event (pipelines.config_join)
      - {table: users.tsv, key: user_id, columns: [age, occupation]}

Bounds (`pipelines.config_limits`): feature names use only A-Z, a-z, 0-9,
"_", "." and "-" and do not start with "." (they become file names such as
`vocab/<name>.txt`); `hash_buckets` is at most 2^62; `num_shards` at most
10,000, and a run with fewer rows than shards keeps only the shards that got
rows (at most one per row, renumbered); counts are integers (YAML reads
`1e6` as text: write 1000000).

Only safe loaders are used: YAML tags that build Python objects are rejected.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
from typing import Any

import yaml

from pipelines import config_limits as limits
from pipelines.config_columns import SourceKeyError, pop_column_source
from pipelines.config_crosses import CrossKeyError, CrossPlan, split_crosses
from pipelines.config_derived import DerivedKeyError, DerivedPlan, split_derived
from pipelines.config_join import JoinSpec, parse_joins
from pipelines.config_keys import section_types
from pipelines.config_shared import SharedKeyError, check_shared_vocabularies
from sparse_io.formats import DELIMITED_FORMATS, LOG_FORMATS, SHARD_FORMATS, check_shard_codec
from sparse_io.readers import ColumnSource, check_encoding, csv_options
from sparse_io.readers.columns import check_sources
from sparse_io.schema import FeatureSpec, Schema, SchemaError, criteo_schema

__all__ = [
    "ConfigError",
    "IngestConfig",
    "FeaturePlan",
    "HistoryConfig",
    "OutputConfig",
    "load_config",
    "parse_config",
    "default_criteo_config",
]

FORMATS = LOG_FORMATS  # the older name, kept for importers


class ConfigError(ValueError):
    """The config is invalid; the message starts with the offending key path."""


@dataclasses.dataclass(frozen=True)
class FeaturePlan:
    """How one sparse feature becomes ids: hashing or a vocabulary (or neither)."""

    name: str
    hash_buckets: int | None = None
    salt: int | None = None
    min_frequency: int = 1
    top_k: int | None = None
    num_oov_buckets: int = 1
    use_vocabulary: bool = False
    shared_vocabulary: str | None = None  # `vocabulary: {shared: NAME}`: one vocab/NAME.txt for several features


@dataclasses.dataclass(frozen=True)
class HistoryConfig:
    """Group events per key into time-ordered item lists (the `histories:` section).

    `item_columns` describe each event's item and are listed parallel to the
    item; every other column of the schema is an event column, carried from
    the example's own event (`event_columns`). `context_from` names earlier
    logs whose events enter histories but are never examples.
    """

    key: str
    item: str
    time: str
    weight: str | None = None
    max_length: int = 50
    min_length: int = 1
    dedupe_consecutive: bool = False
    examples_per_event: bool = False
    item_columns: tuple[str, ...] = ()
    context_from: str | None = None
    num_partitions: int | None = None  # key partitions; None: 32, and one per 1M events past 32M
    memory_budget_mb: int = 256  # of one partition's events in a worker's memory; past it, sorted runs spill

    @property
    def roles(self) -> tuple[str, ...]:
        """The columns grouping consumes: key, item, time, the weight and the item columns."""
        return (self.key, self.item, self.time) + ((self.weight,) if self.weight else ()) + self.item_columns

    def event_columns(self, schema: Schema) -> list[str]:
        """Every other column of `schema`, in schema order: carried to each example from its event."""
        return [name for name in schema.names if name not in self.roles]


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """The validated `output:` section: how shards are written (see the module example)."""

    format: str = "parquet"
    num_shards: int | None = None
    row_group_size: int = 65536
    write_threads: int | None = None
    compression: str | None = None
    shuffle: bool = True
    seed: int | None = 0
    derived: str | None = None  # "at_read" or "stored"; None: at_read in Parquet and Arrow, stored in TFRecord

    @property
    def shard_format(self) -> str:
        """The shard format written (`output.format`): one of `sparse_io.SHARD_FORMATS`."""
        return self.format

    @property
    def derives_at_read(self) -> bool:
        """Derived features whose parameters come from the data are computed by readers, not stored."""
        return self.format != "tfrecord" and self.derived in (None, "at_read")


@dataclasses.dataclass(frozen=True)
class IngestConfig:
    """A validated ingest config."""

    format: str
    schema: Schema
    features: tuple[FeaturePlan, ...]
    output: OutputConfig
    batch_sizes: tuple[int, ...]
    error_budget: float
    list_separator: str = "|"
    read_batch_size: int = 8192
    strict: bool = False
    skip_header: bool | None = None
    histories: HistoryConfig | None = None
    max_line_bytes: int = limits.DEFAULT_MAX_LINE_BYTES
    delimiter: str | None = None
    quote_char: str | None = None
    null_values: tuple[str, ...] | None = None
    feature_null_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    column_sources: tuple[ColumnSource, ...] = ()  # features read from other/several columns, derived labels
    encoding: str = "utf-8"
    joins: tuple[JoinSpec, ...] = ()  # `join:`; `schema` ends with their columns, which the log does not hold
    crosses: tuple[CrossPlan, ...] = ()  # derived features: `features: {name: {cross: [...], ...}}`

    @property
    def read_schema(self) -> Schema:
        """The columns read from the log: `schema` without the joined columns (which the joins add).

        In a history ingest the columns grouping consumes carry their `history_role`, so that an event
        missing one is a bad record (a dead letter) rather than a failed grouping.
        """
        joined = {c for j in self.joins for c in j.columns}
        schema = self.schema.select(n for n in self.schema.names if n not in joined) if joined else self.schema
        h = self.histories
        if h is None:
            return schema
        roles = {h.key: "key", h.item: "item", h.time: "time", **({h.weight: "weight"} if h.weight else {}),
                 **{name: "item_column" for name in h.item_columns}}
        return Schema(dataclasses.replace(s, history_role=roles[s.name]) if s.name in roles else s for s in schema)

    @property
    def log_format(self) -> str:
        """The log format read (`input.format`): one of `sparse_io.LOG_FORMATS`."""
        return self.format

    def read_options(self) -> dict:
        """The layout keywords of `sparse_io.read_file` / `ReadLogs`: the CSV family's, a text file's encoding."""
        encoding = {} if self.encoding == "utf-8" else {"encoding": self.encoding}
        if self.format not in DELIMITED_FORMATS:
            return encoding
        return dict(
            delimiter=self.delimiter,
            quote_char=self.quote_char,
            null_values=self.null_values,
            feature_null_values=dict(self.feature_null_values) or None,
            **({"column_sources": self.column_sources} if self.column_sources else {}),
            **encoding,
        )
    vocab_from: str | None = None  # an ingest output whose id spaces this ingest reuses
    validation: Any = None  # pipelines.anomalies.Thresholds from the `validation:` key; None: the defaults
    derived: tuple[DerivedPlan, ...] = ()  # features bucketized or scaled from a dense column (config_derived)

    def plan(self, name: str) -> FeaturePlan | None:
        """The id plan of feature `name`, or None when the config gives it none."""
        return next((p for p in self.features if p.name == name), None)

    @property
    def hashed(self) -> list[FeaturePlan]:
        """The plans of the hashed features."""
        return [p for p in self.features if p.hash_buckets]

    @property
    def vocabularies(self) -> list[FeaturePlan]:
        """The plans of the features looked up in a vocabulary."""
        return [p for p in self.features if p.use_vocabulary]


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"config key '{path}': {message}")


def _take(section: dict, path: str, allowed: dict[str, type | tuple[type, ...]]) -> dict:
    """Checks `section` is a mapping with only `allowed` keys of the right types."""
    if not isinstance(section, dict):
        raise _fail(path, f"must be a mapping, got {type(section).__name__}")
    unknown = sorted(set(section) - set(allowed))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise _fail(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
    out = {}
    for key, value in section.items():
        want = allowed[key]
        where = f"{path}.{key}" if path else key
        if value is None:
            out[key] = None
            continue
        if want is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise _fail(where, limits.not_an_integer(value))
        if not isinstance(value, want):
            names = want.__name__ if isinstance(want, type) else "/".join(t.__name__ for t in want)
            raise _fail(where, f"must be {names}, got {type(value).__name__} {value!r}")
        out[key] = value
    return out


def _positive(value: int | None, path: str) -> int | None:
    if value is not None and value <= 0:
        raise _fail(path, f"must be positive, got {value}")
    return value


def _at_most(value: int | None, path: str, high: int) -> int | None:
    try:
        limits.check_at_most(value, high)
    except ValueError as e:
        raise _fail(path, str(e)) from None
    return value


def _non_negative(value: int | None, path: str, default: int) -> int:
    if value is None:
        return default
    if value < 0:
        raise _fail(path, f"must be >= 0, got {value}")
    return value


def _schema(raw: Any, fmt: str) -> tuple[Schema, dict[str, list], tuple[ColumnSource, ...]]:
    """The schema, the per-feature null tokens its specs carry (`null_values:` in a spec), and column sources."""
    if raw is None:
        if fmt == "criteo":
            return criteo_schema(), {}, ()
        raise _fail("input.schema", f"required for format {fmt!r} (a list of feature specs)")
    if raw == "criteo":
        return criteo_schema(), {}, ()
    if not isinstance(raw, list):
        raise _fail("input.schema", "must be 'criteo' or a list of feature specs")
    specs, nulls, sources = [], {}, {}
    for i, item in enumerate(raw):
        written = sorted(set(item) & set(INGEST_WRITTEN_KEYS)) if isinstance(item, dict) else []
        if written:
            raise _fail(f"input.schema[{i}].{written[0]}",
                        "is written by the ingest into schema.json (how values became ids), not a config setting")
        if isinstance(item, dict):
            try:
                item, source = pop_column_source(item)
            except SourceKeyError as e:
                raise _fail(f"input.schema[{i}]" + (f".{e.key}" if e.key else ""), str(e)) from None
            if source is not None:
                if fmt not in DELIMITED_FORMATS:
                    raise _fail(f"input.schema[{i}]", f"column, columns and from apply to "
                                                      f"{', '.join(DELIMITED_FORMATS)}, not {fmt!r}")
                sources[i] = source
        if isinstance(item, dict) and item.get("dtype") == "timestamp":
            # `dtype: timestamp, unit: ms` is an int64 column with its time unit (schema.json: time_unit).
            item = {k: v for k, v in item.items() if k != "unit"}
            item.update(dtype="int64", time_unit=raw[i].get("unit", raw[i].get("time_unit", "s")))
        elif isinstance(item, dict) and "unit" in item:
            raise _fail(f"input.schema[{i}].unit", "applies to dtype: timestamp")
        if isinstance(item, dict) and "null_values" in item:
            item = dict(item)
            tokens = item.pop("null_values")
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise _fail(f"input.schema[{i}].null_values", f"must be a list of strings, got {tokens!r}")
            nulls[item.get("name")] = tokens
        try:
            specs.append(FeatureSpec.from_dict(item))
        except (SchemaError, TypeError) as e:
            raise _fail(f"input.schema[{i}]", str(e)) from e
    bad_name = limits.check_feature_names(spec.name for spec in specs)
    if bad_name is not None:
        raise _fail(f"input.schema[{bad_name[0]}]", bad_name[1])
    for i, spec in enumerate(specs):
        _at_most(spec.hash_buckets, f"input.schema[{i}].hash_buckets", limits.MAX_HASH_BUCKETS)
    try:
        schema = Schema(specs)
    except SchemaError as e:
        raise _fail("input.schema", str(e)) from e
    for i, source in sources.items():
        try:
            check_sources(schema, [source])
        except ValueError as e:
            raise _fail(f"input.schema[{i}]", str(e)) from None
    return schema, nulls, tuple(sources.values())


def _encoding(name: str | None, fmt: str) -> str:
    if name is None:
        return "utf-8"
    if fmt == "parquet":
        raise _fail("input.encoding", "applies to text formats, not 'parquet'")
    try:
        return check_encoding(name)
    except ValueError as e:
        raise _fail("input.encoding", str(e)) from None


# schema.json keys only an ingest writes: a config giving them would claim ids the ingest did not make.
INGEST_WRITTEN_KEYS = ("id_space", "oov_ids", "vocabulary_size", "cross", "cross_max_per_row", "shared_vocabulary",
                       "transform", "at_read")


def _delimiter(text: str | None) -> str | None:
    # YAML's plain and single-quoted scalars keep "\t" as two characters; a tab is meant.
    return "\t" if text == "\\t" else text


_PLAN_KEYS = section_types("features.<name>")
_VOCAB_KEYS = section_types("features.<name>.vocabulary")


def _feature_plans(raw: Any, schema: Schema, histories: HistoryConfig | None) -> tuple[FeaturePlan, ...]:
    raw = raw or {}
    if not isinstance(raw, dict):
        raise _fail("features", "must be a mapping from feature name (or glob) to its settings")
    sparse_names = [f.name for f in schema.sparse]
    for listed in (histories.item, *histories.item_columns) if histories is not None else ():
        if listed not in sparse_names:
            # Grouping turns the per-event item (and item columns) into history list columns.
            sparse_names.append(listed)
    chosen: dict[str, tuple[str, dict]] = {}
    # Globs first, exact names after, so an exact entry overrides a glob.
    for pattern in sorted(raw, key=lambda p: p in sparse_names):
        path = f"features.{pattern}"
        matches = [n for n in sparse_names if fnmatch.fnmatchcase(n, pattern)]
        if not matches:
            known = ", ".join(sparse_names) or "none"
            raise _fail(path, f"matches no sparse feature of the schema ({known})")
        settings = _take(raw[pattern] or {}, path, _PLAN_KEYS)
        if settings.get("hash_buckets") and settings.get("vocabulary") is not None:
            raise _fail(path, "give either hash_buckets or vocabulary, not both")
        for name in matches:
            chosen[name] = (path, settings)
    plans = []
    for name in sparse_names:
        if name not in chosen:
            continue
        path, s = chosen[name]
        vocab = s.get("vocabulary")
        v = _take(vocab, f"{path}.vocabulary", _VOCAB_KEYS) if vocab is not None else {}
        plans.append(
            FeaturePlan(
                name=name,
                hash_buckets=_at_most(
                    _positive(s.get("hash_buckets"), f"{path}.hash_buckets"), f"{path}.hash_buckets",
                    limits.MAX_HASH_BUCKETS,
                ),
                salt=s.get("salt"),
                use_vocabulary=vocab is not None,
                min_frequency=_positive(v.get("min_frequency"), f"{path}.vocabulary.min_frequency") or 1,
                top_k=_positive(v.get("top_k"), f"{path}.vocabulary.top_k"),
                num_oov_buckets=_non_negative(v.get("num_oov_buckets"), f"{path}.vocabulary.num_oov_buckets", 1),
                shared_vocabulary=v.get("shared"),
            )
        )
    planned = {p.name for p in plans}
    for spec in schema.sparse:
        if spec.dtype == "string" and spec.name not in planned:
            raise _fail(f"features.{spec.name}", "string ids need hash_buckets or a vocabulary to become integers")
    return tuple(plans)


def _histories(raw: Any, schema: Schema) -> HistoryConfig | None:
    if raw is None:
        return None
    keys = section_types("histories")
    h = _take(raw, "histories", keys)
    for required in ("key", "item", "time"):
        if not h.get(required):
            raise _fail(f"histories.{required}", "is required")
    for role in ("key", "item", "time", "weight"):
        column = h.get(role)
        if column is not None and column not in schema:
            raise _fail(f"histories.{role}", f"names {column!r}, which is not in the schema ({schema.names})")
        if column is not None and schema[column].is_sparse:
            # Grouping sorts and partitions on these: a list per event has no order.
            raise _fail(f"histories.{role}", f"{column!r} must hold one value per event (kind: dense); it is sparse")
    _positive(h.get("max_length"), "histories.max_length")
    _positive(h.get("min_length"), "histories.min_length")
    _positive(h.get("num_partitions"), "histories.num_partitions")
    _positive(h.get("memory_budget_mb"), "histories.memory_budget_mb")
    item_columns = h.pop("item_columns", None) or []
    roles = [h[r] for r in ("key", "item", "time", "weight") if h.get(r)]
    for i, column in enumerate(item_columns):
        path = f"histories.item_columns[{i}]"
        if not isinstance(column, str) or column not in schema:
            raise _fail(path, f"names {column!r}, which is not in the schema ({schema.names})")
        if column in roles or item_columns.count(column) > 1:
            raise _fail(path, f"{column!r} is already the history's {_role_of(column, h) or 'item column'}")
        if schema[column].kind != "dense":
            raise _fail(path, f"{column!r} must hold one value per event (kind: dense), like the item; "
                              f"it is {schema[column].kind}")
    if h.get("context_from") is not None and not h.get("examples_per_event"):
        raise _fail("histories.context_from", "needs examples_per_event: true (context events only lengthen "
                                              "the histories of this log's own events)")
    config = HistoryConfig(**{k: v for k, v in h.items() if v is not None}, item_columns=tuple(item_columns))
    for column in config.event_columns(schema):
        spec = schema[column]
        if spec.kind == "label":
            raise _fail("histories", f"column {column!r} is a label; a history example's answer is its target "
                                     "item (and histories.weight): give it as the weight or leave it out")
        if spec.kind == "dense" and spec.dtype == "string":
            raise _fail("histories", f"column {column!r} is a dense string, which no model can take; declare it "
                                     "kind: sparse with hash_buckets or a vocabulary under features, or list it in "
                                     "histories.item_columns when it describes the item")
    return config


def _role_of(column: str, h: dict) -> str | None:
    return next((role for role in ("key", "item", "time", "weight") if h.get(role) == column), None)


def _check_item_column_plans(histories: HistoryConfig | None, plans: tuple[FeaturePlan, ...]) -> None:
    """An item column is a list of ids, like the item: it needs an id range (hash_buckets or a vocabulary)."""
    planned = {p.name for p in plans if p.hash_buckets or p.use_vocabulary}
    for i, column in enumerate(histories.item_columns if histories is not None else ()):
        if column not in planned:
            raise _fail(f"histories.item_columns[{i}]", f"{column!r} needs hash_buckets or a vocabulary under "
                                                        f"features.{column} (its values become ids)")


def parse_config(
    data: Any, *, format_override: str | None = None, delimiter_override: str | None = None
) -> IngestConfig:
    """Validates a parsed config mapping and returns an `IngestConfig`.

    `format_override` and `delimiter_override` (the CLI's `--format` and
    `--delimiter`) replace `input.format` and `input.delimiter`.

    Raises:
      ConfigError: naming the first invalid key path.
    """
    if data is None:
        data = {}
    top = _take(data, "", section_types(""))
    from pipelines.anomalies import ThresholdError, thresholds_from

    try:
        thresholds = thresholds_from(top.get("validation")) if top.get("validation") is not None else None
    except ThresholdError as e:
        raise ConfigError(str(e)) from None
    inp = _take(top.get("input") or {}, "input", section_types("input"))
    max_line_bytes = _at_most(
        _positive(inp.get("max_line_bytes"), "input.max_line_bytes"), "input.max_line_bytes",
        limits.MAX_LINE_BYTES_LIMIT,
    ) or limits.DEFAULT_MAX_LINE_BYTES
    fmt = format_override or inp.get("format") or "criteo"
    if fmt not in LOG_FORMATS:
        raise _fail("input.format", f"{fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    schema, feature_nulls, sources = _schema(inp.get("schema"), fmt)
    encoding = _encoding(inp.get("encoding"), fmt)
    if sources and inp.get("skip_header") is False:
        named = next(((s.feature, n) for s in sources for n in s.header_names()), None)
        if named is not None:
            raise _fail("input.schema", f"feature {named[0]!r} reads header column {named[1]!r}, but skip_header "
                                        "is false (give 0-based positions: columns: {first: ..., count: ...})")
    out = _take(top.get("output") or {}, "output", section_types("output"))
    if out.get("format", "parquet") not in SHARD_FORMATS:
        raise _fail("output.format", f"{out['format']!r} is not one of {', '.join(SHARD_FORMATS)}")
    _at_most(_positive(out.get("num_shards"), "output.num_shards"), "output.num_shards", limits.MAX_NUM_SHARDS)
    _positive(out.get("row_group_size"), "output.row_group_size")
    _positive(out.get("write_threads"), "output.write_threads")
    if out.get("derived") is not None:
        if out["derived"] not in ("at_read", "stored"):
            raise _fail("output.derived", f"must be at_read or stored, got {out['derived']!r}")
        if out["derived"] == "at_read" and out.get("format") == "tfrecord":
            raise _fail("output.derived", "at_read needs Parquet or Arrow shards (a TFRecord reader parses "
                                          "whole records); TFRecord shards store every derived feature")
    codec = out.get("compression")
    if codec is not None:
        try:
            check_shard_codec(codec, out.get("format") or "parquet")
        except ValueError as e:
            raise _fail("output.compression", str(e)) from None
    stats = _take(top.get("stats") or {}, "stats", section_types("stats"))
    batch_sizes = stats.get("batch_sizes") or [4096]
    for i, b in enumerate(batch_sizes):
        if not isinstance(b, int) or isinstance(b, bool) or b <= 0:
            raise _fail(f"stats.batch_sizes[{i}]", f"must be a positive integer, got {b!r}")
    budget = top.get("error_budget")
    budget = 0.0 if budget is None else float(budget)
    if not 0.0 <= budget <= 1.0:
        raise _fail("error_budget", f"must be a fraction between 0 and 1, got {budget}")
    separator = inp.get("list_separator") or "|"
    if len(separator) != 1:
        raise _fail("input.list_separator", f"must be one character, got {separator!r}")
    delimiter = _delimiter(delimiter_override if delimiter_override is not None else inp.get("delimiter"))
    if delimiter_override is not None and fmt not in DELIMITED_FORMATS:
        raise _fail("input.delimiter", f"--delimiter applies to {', '.join(DELIMITED_FORMATS)}, not {fmt!r}")
    for key, value in (("delimiter", delimiter), ("quote_char", inp.get("quote_char")),
                       ("null_values", inp.get("null_values")), ("null_values", feature_nulls or None)):
        if value is not None and fmt not in DELIMITED_FORMATS:
            raise _fail(f"input.{key}", f"applies to {', '.join(DELIMITED_FORMATS)}, not {fmt!r}")
    unknown = sorted(set(feature_nulls) - set(schema.names))
    if unknown:
        raise _fail("input.schema", f"null_values given for unknown feature(s) {unknown}")
    try:
        layout = csv_options(fmt, delimiter, inp.get("quote_char"), inp.get("null_values"), feature_nulls,
                             separator)
    except ValueError as e:
        key = next((k for k in ("list_separator", "quote_char", "null_values", "delimiter") if k in str(e)), "format")
        raise _fail(f"input.{key}", str(e)) from None
    layout_of_input = dict(delimiter=delimiter, quote_char=inp.get("quote_char"), null_values=inp.get("null_values"),
                           encoding=inp.get("encoding"), list_separator=separator)
    joins, schema = parse_joins(top.get("join"), schema, fmt, layout_of_input, fail=_fail, take=_take,
                                parse_schema=_schema)
    histories = _histories(top.get("histories"), schema)
    try:
        raw_features, crosses = split_crosses(top.get("features"), schema, histories)
    except CrossKeyError as e:
        raise _fail(e.path, str(e)) from None
    try:
        raw_features, derived = split_derived(raw_features, schema, histories=top.get("histories") is not None)
    except DerivedKeyError as e:
        raise _fail(e.key, str(e)) from None
    features = _feature_plans(raw_features, schema, histories)
    try:
        check_shared_vocabularies(features, schema)
    except SharedKeyError as e:
        raise _fail(e.path, str(e)) from None
    _check_item_column_plans(histories, features)
    return IngestConfig(
        format=fmt,
        schema=schema,
        features=features,
        output=OutputConfig(**{k: v for k, v in out.items() if v is not None}),
        batch_sizes=tuple(batch_sizes),
        error_budget=budget,
        list_separator=separator,
        read_batch_size=_positive(inp.get("batch_size"), "input.batch_size") or 8192,
        strict=bool(inp.get("strict")),
        skip_header=inp.get("skip_header"),
        histories=histories,
        max_line_bytes=max_line_bytes,
        delimiter=layout.delimiter if fmt in DELIMITED_FORMATS else None,
        quote_char=layout.quote_char if fmt in DELIMITED_FORMATS else None,
        null_values=layout.null_values if fmt in DELIMITED_FORMATS else None,
        feature_null_values=layout.feature_null_values,
        column_sources=sources,
        encoding=encoding,
        joins=joins,
        crosses=crosses,
        vocab_from=top.get("vocab_from") or None,
        validation=thresholds,
        derived=derived,
    )


def load_config(
    path: str, *, format_override: str | None = None, delimiter_override: str | None = None
) -> IngestConfig:
    """Reads and validates a YAML (.yaml/.yml) or JSON config file.

    Raises:
      ConfigError: unreadable file, bad syntax, or an invalid key (named).
    """
    if not os.path.exists(path):
        raise ConfigError(f"config file {path!r} does not exist")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} is not a regular file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path!r} is not UTF-8 text: byte {e.start} cannot be decoded") from e
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        kind = "JSON" if path.endswith(".json") else "YAML"
        raise ConfigError(f"config file {path!r} is not valid {kind}: {str(e).splitlines()[0]}") from e
    return parse_config(data, format_override=format_override, delimiter_override=delimiter_override)


def default_criteo_config(*, hash_buckets: int = 100_000, num_shards: int | None = None) -> IngestConfig:
    """The config the demo and a bare `--format criteo` run use: every C feature hashed."""
    return parse_config(
        {
            "input": {"format": "criteo"},
            "features": {"C*": {"hash_buckets": hash_buckets}},
            "output": {"format": "parquet", "num_shards": num_shards},
        }
    )
