"""Every ingest config key, declared once: its YAML path, type, default, allowed values, meaning and CLI flag.

`pipelines.config` takes each section's allowed keys and their types from
here (`section_types`), so a key cannot be accepted without being declared,
and `reference_markdown()` renders the declarations as the config reference
(`python -m pipelines.ingest --config_reference`, and `docs/config.md`, which
a test keeps equal to it).

Paths: `input.format` is key `format` of the `input:` mapping;
`features.<name>` is the mapping under any feature name (or glob);
`input.schema[]` is one entry of the `input.schema` list.

Example:
  >>> section_types("stats")
  {'batch_sizes': <class 'list'>}
  >>> KEY_BY_PATH["output.num_shards"].flag
  ''
"""

from __future__ import annotations

import dataclasses

__all__ = ["ConfigKey", "KEYS", "KEY_BY_PATH", "SECTIONS", "section_types", "reference_markdown"]

_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "number": (int, float),
    "list": list,
    "mapping": dict,
    "string or list": (str, list),
    "integer or list": (int, list),
    "string or mapping": (str, dict),
    "scalar": (str, int, float),
}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One config key.

    Attributes:
      path: the YAML path (`output.num_shards`, `features.<name>.hash_buckets`).
      type: one of the type names above ("string", "integer", ...).
      default: the value taken when the key is absent, as text ("" when it is required or has none).
      meaning: one line.
      allowed: the values or range accepted, as text ("" when the type says it all).
      example: a YAML value.
      flag: the `pipelines.ingest` flag that overrides it, or "".
    """

    path: str
    type: str
    default: str
    meaning: str
    allowed: str = ""
    example: str = ""
    flag: str = ""

    def __post_init__(self) -> None:
        if self.type not in _PYTHON_TYPES:
            raise ValueError(f"config key {self.path}: unknown type name {self.type!r}")

    @property
    def section(self) -> str:
        """The mapping the key lives in: "" for the top level, else the path before the last dot."""
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        """The key's own name, the path's last part."""
        return self.path.rpartition(".")[2]


# Section order is the reference's order; keys keep the order they are declared in.
SECTIONS = ("", "input", "input.schema[]", "features.<name>", "features.<name>.vocabulary", "features.<derived>",
            "features.<derived>.bucketize", "features.<cross>", "histories",
            "join[]", "output", "stats", "validation")

KEYS: tuple[ConfigKey, ...] = (
    # --- top level ---------------------------------------------------------------------------------------
    ConfigKey("input", "mapping", "{}", "how the log is read (below)"),
    ConfigKey("features", "mapping", "{}", "how each sparse feature becomes integer ids, by name or glob (below)",
              example='{"C*": {hash_buckets: 1000000}}'),
    ConfigKey("histories", "mapping", "", "group events per key into time-ordered item lists (below); "
              "absent: one example per log row"),
    ConfigKey("output", "mapping", "{}", "how shards are written (below)"),
    ConfigKey("stats", "mapping", "{}", "what stats.json measures (below)"),
    ConfigKey("error_budget", "number", "0.0", "fraction of records that may be dead letters before the run fails",
              "0 to 1", "0.001"),
    ConfigKey("vocab_from", "string", "", "an earlier ingest's output whose vocabularies and hash settings this "
              "ingest reuses, so equal raw values get equal ids", "", "out/train", "--vocab_from"),
    ConfigKey("join", "list", "[]", "side tables whose columns are added to every event by key (join[] below)",
              "", "[{table: users.tsv, key: user_id, columns: [age, occupation]}]"),
    ConfigKey("validation", "mapping", "", "anomaly thresholds for `pipelines.validate` and the ingest's "
              "comparison with --vocab_from (below)"),
    # --- input -------------------------------------------------------------------------------------------
    ConfigKey("input.format", "string", "criteo", "the log format", "criteo, csv, tsv, jsonl, parquet",
              "csv", "--format"),
    ConfigKey("input.schema", "string or list", "criteo for format criteo, else required",
              "the log's columns: `criteo`, or a list of column entries (input.schema[] below)",
              "", '[{name: label, kind: label, dtype: int64}, {name: user, kind: sparse, dtype: string}]'),
    ConfigKey("input.list_separator", "string", "\"|\"", "separates the ids of a list cell", "one character", "^"),
    ConfigKey("input.batch_size", "integer", "8192", "rows per Arrow record batch while reading", ">= 1", "4096"),
    ConfigKey("input.strict", "boolean", "false", "a bad record fails the run at once instead of becoming a "
              "dead letter", "", "true"),
    ConfigKey("input.skip_header", "boolean", "true for csv/tsv", "the first line names the columns",
              "", "false"),
    ConfigKey("input.max_line_bytes", "integer", "16777216", "a longer line is a dead letter", ">= 1", "1048576"),
    ConfigKey("input.delimiter", "string", ", for csv, a tab for tsv", "separates the cells of a line (csv, tsv)",
              'one character; "\\t" is a tab', '";"', "--delimiter"),
    ConfigKey("input.quote_char", "string", '"', "quotes a cell holding the delimiter (csv, tsv)",
              "one character", "\"'\""),
    ConfigKey("input.null_values", "list", '["", "NA", "NULL", "\\N"]', "cells that mean missing (csv, tsv)",
              "strings", '["", "-"]'),
    ConfigKey("input.encoding", "string", "utf-8", "the text encoding of the log (text formats); undecodable "
              "bytes are dead letters naming the line", "any Python codec name", "latin-1"),
    # --- one schema entry ----------------------------------------------------------------------------------
    ConfigKey("input.schema[].name", "string", "", "the feature's name (also a file name in vocab/)",
              "A-Z a-z 0-9 _ . -, not starting with .", "user_id"),
    ConfigKey("input.schema[].kind", "string", "sparse", "what the column is to the model",
              "sparse (a list of ids), dense (one number), label", "dense"),
    ConfigKey("input.schema[].dtype", "string", "int64", "the values' type",
              "int64, int32, float32, float64, string, timestamp", "string"),
    ConfigKey("input.schema[].unit", "string", "s", "a timestamp's unit (dtype: timestamp); unix numbers or "
              "ISO-8601 text", "s, ms, us, ns", "ms"),
    ConfigKey("input.schema[].time_unit", "string", "", "the same as unit (the name schema.json uses)",
              "s, ms, us, ns", "ms"),
    ConfigKey("input.schema[].label_type", "string", "binary for integer labels, real for floats",
              "what the label measures, which picks the task", "binary, integer, real", "integer"),
    ConfigKey("input.schema[].weighted", "boolean", "false", "list cells carry a weight per id (`id:weight`)",
              "sparse only", "true"),
    ConfigKey("input.schema[].max_length", "integer", "", "keep at most this many ids of a row (sparse)",
              ">= 1", "50"),
    ConfigKey("input.schema[].hash_buckets", "integer", "", "hash this feature's ids into that many buckets "
              "(the same as features.<name>.hash_buckets)", "1 to 2^62", "100000"),
    ConfigKey("input.schema[].num_oov_buckets", "integer", "", "ids kept for values outside the vocabulary "
              "(the same as features.<name>.vocabulary.num_oov_buckets)", ">= 0", "1"),
    ConfigKey("input.schema[].salt", "integer or list", "", "keyed hashing salt (the same as "
              "features.<name>.salt)", "an integer or two", "42"),
    ConfigKey("input.schema[].null_values", "list", "input.null_values", "this column's own missing tokens",
              "strings", '["0"]'),
    ConfigKey("input.schema[].column", "string", "the entry's name", "the header column read under this name",
              "", '"user_id:token"'),
    ConfigKey("input.schema[].columns", "mapping", "", "several columns read as one list feature: every header "
              "column of a name, or 0-based positions", "{name: ...} or {first: ..., count: ...}",
              "{name: his_cate}"),
    ConfigKey("input.schema[].padding", "scalar", "", "cells equal to it are dropped from a columns: list", "",
              '"0"'),
    ConfigKey("input.schema[].mask", "mapping", "", "positions whose mask cell is 0 are dropped from a columns: "
              "list", "{name: ...} or {first: ..., count: ...}, as many as the columns", "{name: his_mask}"),
    ConfigKey("input.schema[].from", "string", "", "a derived label's source column", "", "rating"),
    ConfigKey("input.schema[].at_least", "number", "", "a derived label is 1 where the source is >= it", "",
              "4"),
    ConfigKey("input.schema[].in", "list", "", "a derived label is 1 where the source is one of these", "",
              "[4, 5]"),
    # --- features ------------------------------------------------------------------------------------------
    ConfigKey("features.<name>.hash_buckets", "integer", "", "ids are keras.layers.Hashing buckets of the raw "
              "values", "1 to 2^62", "1000000"),
    ConfigKey("features.<name>.salt", "integer", "", "keyed SipHash instead of FarmHash (with hash_buckets)",
              "", "7"),
    ConfigKey("features.<name>.vocabulary", "mapping", "", "ids are positions in a vocabulary counted at ingest "
              "(count descending, ties by value ascending); vocab/<name>.txt", "", "{min_frequency: 2}"),
    ConfigKey("features.<name>.vocabulary.min_frequency", "integer", "1", "values seen fewer times are OOV",
              ">= 1", "5"),
    ConfigKey("features.<name>.vocabulary.top_k", "integer", "", "keep only the most frequent values", ">= 1",
              "100000"),
    ConfigKey("features.<name>.vocabulary.num_oov_buckets", "integer", "1", "ids kept for values outside the "
              "vocabulary", ">= 0", "2"),
    ConfigKey("features.<name>.vocabulary.shared", "string", "", "several features counted into one vocabulary "
              "vocab/NAME.txt and mapped into one id space (one embedding table in the trainer); their other "
              "vocabulary settings must agree", "a name that is no other feature's", "category"),
    # --- a derived feature: a dense column bucketized or scaled, keyed by its own name ---------------------------
    ConfigKey("features.<derived>.source", "string", "", "the dense number column the feature is computed from "
              "(it stays in the shards as its own feature)", "a dense int or float column", "age"),
    ConfigKey("features.<derived>.bucketize", "mapping", "", "a one-id sparse feature: keras.layers.Discretization's "
              "ids over the boundaries; a missing value gets no id", "boundaries or quantiles (below)",
              "{quantiles: 10}"),
    ConfigKey("features.<derived>.scale", "string", "", "a dense float32 feature: (x - mean) / std (population std, "
              "as tft.scale_to_z_score), (x - min) / (max - min), or log1p(x); missing stays missing",
              "z_score, min_max, log1p", "z_score"),
    ConfigKey("features.<derived>.bucketize.boundaries", "list", "", "the bucket boundaries, given",
              "increasing numbers", "[18, 25, 35, 50]"),
    ConfigKey("features.<derived>.bucketize.quantiles", "integer", "", "N-quantile boundaries computed at ingest "
              "by a mergeable sketch (rank error <= 0.01), recorded in schema.json, reused by --vocab_from",
              "2 to 1000", "10"),
    # --- a cross: a new feature keyed by its own name --------------------------------------------------------
    ConfigKey("features.<cross>.cross", "list", "", "the columns crossed: ids are keras.layers.HashedCrossing's "
              "of their raw values (list columns: the Cartesian product of the lists)",
              "two or more sparse or integer dense columns", "[user_id, occupation]"),
    ConfigKey("features.<cross>.hash_buckets", "integer", "", "the crosses' bucket count (HashedCrossing's "
              "num_bins)", "1 to 2^62", "100000"),
    ConfigKey("features.<cross>.max_per_row", "integer", "256", "crosses kept per row; the rest are dropped and "
              "counted in stats.json (cross_overflow)", ">= 1", "64"),
    # --- histories -----------------------------------------------------------------------------------------
    ConfigKey("histories.key", "string", "", "the column whose events form one history (a user, a session)",
              "a dense column", "user_id"),
    ConfigKey("histories.item", "string", "", "the column listed in the history", "a dense column", "item_id"),
    ConfigKey("histories.time", "string", "", "orders the events", "a dense column", "timestamp"),
    ConfigKey("histories.weight", "string", "", "a value listed beside each item (a rating, a dwell time)",
              "a dense column", "rating"),
    ConfigKey("histories.max_length", "integer", "50", "the most recent items kept", ">= 1", "20"),
    ConfigKey("histories.min_length", "integer", "1", "shorter histories make no example", ">= 1", "2"),
    ConfigKey("histories.dedupe_consecutive", "boolean", "false", "repeats of the same item in a row count once",
              "", "true"),
    ConfigKey("histories.examples_per_event", "boolean", "false", "one example per event with the history "
              "before it (otherwise one per key)", "", "true"),
    ConfigKey("histories.item_columns", "list", "[]", "columns describing the item, listed beside it",
              "dense columns", "[category]"),
    ConfigKey("histories.context_from", "string", "", "earlier logs whose events lengthen histories but are "
              "never examples (needs examples_per_event)", "a file pattern", "logs/2026-11-*.tsv"),
    ConfigKey("histories.num_partitions", "integer", "32, and one more per 1M events past 32M",
              "key ranges the grouping is split into", ">= 1", "256"),
    ConfigKey("histories.memory_budget_mb", "integer", "256", "a partition's events held in memory before "
              "sorted runs spill to disk", ">= 1", "512"),
    # --- one join entry -------------------------------------------------------------------------------------
    ConfigKey("join[].table", "string", "", "the side table's path or pattern (relative: to where the ingest is "
              "launched)", "local or gs://", "users.tsv"),
    ConfigKey("join[].key", "string", "", "the column matched between the events and the table",
              "one value per row; the events' dtype", "user_id"),
    ConfigKey("join[].columns", "list", "", "the table's columns added to each event; an event whose key is "
              "missing from the table gets missing values (counted in stats.json's joins)", "", "[age, occupation]"),
    ConfigKey("join[].format", "string", "the input's (tsv for criteo logs)", "the table's format",
              "criteo, csv, tsv, jsonl, parquet", "csv"),
    ConfigKey("join[].schema", "list", "undeclared columns are sparse strings", "the table's columns, as "
              "input.schema takes them", "", "[{name: age, kind: dense, dtype: int64}]"),
    ConfigKey("join[].delimiter", "string", "the input's, for a table in its format", "as input.delimiter", "",
              '"::"'),
    ConfigKey("join[].quote_char", "string", "the input's, for a table in its format", "as input.quote_char"),
    ConfigKey("join[].null_values", "list", "the input's, for a table in its format", "as input.null_values"),
    ConfigKey("join[].encoding", "string", "the input's, for a table in its format", "as input.encoding"),
    ConfigKey("join[].list_separator", "string", "the input's, for a table in its format",
              "as input.list_separator", "", '" "'),
    ConfigKey("join[].skip_header", "boolean", "the input's, for a table in its format", "as input.skip_header; "
              "false needs a schema listing every column in order"),
    ConfigKey("join[].side_input_max_mb", "integer", "64", "a table of at most this many MiB is a Beam side "
              "input; a larger one is joined by CoGroupByKey", ">= 0", "256"),
    ConfigKey("join[].num_partitions", "integer", "one per 64 MiB of table, at least 16", "CoGroupByKey's "
              "partitions", ">= 1", "64"),
    # --- output --------------------------------------------------------------------------------------------
    ConfigKey("output.format", "string", "parquet", "the shard format", "parquet, tfrecord, arrow", "arrow"),
    ConfigKey("output.num_shards", "integer", "one per 128 MiB of log text", "shards written", "1 to 10000",
              "8"),
    ConfigKey("output.row_group_size", "integer", "65536", "rows per Parquet row group / Arrow record batch",
              ">= 1", "16384"),
    ConfigKey("output.write_threads", "integer", "the worker's CPUs, at most 4", "shards a worker encodes at "
              "once", ">= 1", "2"),
    ConfigKey("output.compression", "string", "zstd for Parquet, none for Arrow", "the shards' codec",
              "Parquet: zstd, lz4, snappy, none; Arrow: none, lz4, zstd", "lz4"),
    ConfigKey("output.shuffle", "boolean", "true", "rows are shuffled across shards", "", "false"),
    ConfigKey("output.seed", "integer", "0", "the shuffle's seed: the same seed, the same shards", "", "7"),
    ConfigKey("output.derived", "string", "at_read for Parquet and Arrow, stored for TFRecord",
              "derived features whose parameters come from the data (quantile buckets, z_score, min_max): "
              "computed by readers from schema.json's parameters and the stored source column, or stored "
              "(the ingest then waits for the analysis before writing)", "at_read, stored", "stored"),
    # --- stats ---------------------------------------------------------------------------------------------
    ConfigKey("stats.batch_sizes", "list", "[4096]", "batch sizes whose id-count capacities stats.json "
              "records (make_dataset pads to them)", "positive integers", "[1024, 4096]"),
    # --- validation ----------------------------------------------------------------------------------------
    ConfigKey("validation.thresholds", "mapping", "pipelines.anomalies.DEFAULT_THRESHOLDS",
              "anomaly kind -> threshold, for every feature", "numbers >= 0", "{categorical_drift: 0.2}"),
    ConfigKey("validation.features", "mapping", "", "feature -> {anomaly kind: threshold}, overriding the "
              "thresholds above", "", "{C3: {missing_rate: 0.3}}"),
)

KEY_BY_PATH = {key.path: key for key in KEYS}


def section_types(section: str) -> dict[str, type | tuple[type, ...]]:
    """The keys of one config mapping and the Python types their values must have.

    Raises:
      KeyError: `section` declares no keys.
    """
    types = {key.name: _PYTHON_TYPES[key.type] for key in KEYS if key.section == section}
    if not types:
        raise KeyError(f"no config keys are declared under {section!r}")
    return types


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else ""


def reference_markdown() -> str:
    """The config reference: one table per section, every key with type, default, allowed values, meaning.

    Example:
      >>> reference_markdown().splitlines()[0]
      '# Ingest config reference'
    """
    lines = [
        "# Ingest config reference",
        "",
        "Generated from `pipelines/config_keys.py` by `python -m pipelines.ingest --config_reference`;",
        "a test keeps this file equal to that output. A key not listed here is an error that names it.",
    ]
    for section in SECTIONS:
        keys = [key for key in KEYS if key.section == section]
        title = "top level" if not section else f"`{section}`"
        lines += ["", f"## {title}", "",
                  "| key | type | default | allowed | meaning | example | flag |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| `{key.name}` | {key.type} | {_cell(key.default)} | {_cell(key.allowed)} | {_cell(key.meaning)} "
                  f"| {('`' + _cell(key.example) + '`') if key.example else ''} | {key.flag} |" for key in keys]
    return "\n".join(lines) + "\n"
