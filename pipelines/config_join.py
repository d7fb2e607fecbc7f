r"""The `join:` section of the ingest config: side tables whose columns are added to every event.

::

    join:
      - table: users.tsv          # a path or pattern, local or gs:// (relative: to where the ingest is launched)
        key: user_id              # a column of the events and of the table (one value per row)
        columns: [age, occupation]  # the table's columns to add (every other column is dropped)
        # optional:
        format: tsv               # any of sparse_io.LOG_FORMATS; default: the input's ("criteo" logs: tsv)
        schema: [{name: age, kind: dense, dtype: int64}]  # specs as input.schema takes them
        delimiter: "\t"           # quote_char, null_values, encoding, list_separator, skip_header: as in input;
                                  # default: the input's when the table is in the input's format
        side_input_max_mb: 64     # a table of at most this many MiB is a side input; larger: CoGroupByKey
        num_partitions: 16        # CoGroupByKey's partitions; default one per 64 MiB of table, at least 16

Columns: a joined column that `schema` does not declare is a sparse string
column (one categorical value, or a `list_separator` list, per row), so it
needs `hash_buckets` or a vocabulary under `features:` like any string
column; declare numbers in `schema` (`kind: dense`). The key is read with the
events' dtype. A table with a header row (csv/tsv, the default), jsonl and
parquet find columns by name, so `schema` need only declare what the defaults
get wrong; a headerless file (`skip_header: false`) is read by position, so
`schema` must then list every column of the file, in order. A typed header
column (`age:token`) is read with `column:` as in input.schema.

The joined columns follow the input's columns in the ingest's schema (in
`join` order), and are ordinary columns from there on: `features:`,
histories, statistics, schema.json and the serving signature (whose caller
supplies them) see no difference. A later join may use an earlier one's
column as its key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from pipelines import config_limits as limits
from pipelines.config_keys import section_types
from sparse_io.formats import DELIMITED_FORMATS, LOG_FORMATS
from sparse_io.readers import ColumnSource, csv_options
from sparse_io.schema import FeatureSpec, Schema

__all__ = ["JoinSpec", "parse_joins", "DEFAULT_SIDE_INPUT_MAX_MB", "PARTITION_BYTES", "MIN_PARTITIONS"]

DEFAULT_SIDE_INPUT_MAX_MB = 64  # every worker holds a side input whole: kept well below a worker's memory
PARTITION_BYTES = 64 << 20  # of table text per CoGroupByKey partition, held by one worker at a time
MIN_PARTITIONS = 16
_MAX_PARTITIONS = 10_000
_KEY_DTYPES = ("int64", "int32", "string")

_KEYS = section_types("join[]")


@dataclasses.dataclass(frozen=True)
class JoinSpec:
    """One validated `join:` entry (see the module doc).

    Attributes:
      table: the table's path or pattern.
      key: the join key, a column of the events and of the table.
      columns: the table's columns added to each event.
      format: the table's log format.
      schema: what is read from the table: the key, `columns`, and any other column `schema:` declared.
      table_bytes: the table's size, found when the ingest is launched (None until then).
    """

    table: str
    key: str
    columns: tuple[str, ...]
    format: str
    schema: Schema
    list_separator: str = "|"
    skip_header: bool | None = None
    delimiter: str | None = None
    quote_char: str | None = None
    null_values: tuple[str, ...] | None = None
    feature_null_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    column_sources: tuple[ColumnSource, ...] = ()
    encoding: str = "utf-8"
    side_input_max_mb: int = DEFAULT_SIDE_INPUT_MAX_MB
    num_partitions: int | None = None
    table_bytes: int | None = None

    def read_options(self) -> dict:
        """The `sparse_io.readers.read_logs` keywords the table is read with (beside format and schema)."""
        options: dict[str, Any] = {"list_separator": self.list_separator, "skip_header": self.skip_header}
        if self.encoding != "utf-8":
            options["encoding"] = self.encoding
        if self.format in DELIMITED_FORMATS:
            options.update(delimiter=self.delimiter, quote_char=self.quote_char, null_values=self.null_values,
                           feature_null_values=dict(self.feature_null_values) or None,
                           column_sources=self.column_sources or None)
        return options

    @property
    def side_input(self) -> bool:
        """Whether the table is joined as a side input: its size is within `side_input_max_mb`.

        An unknown size (`--validate_only` lists no file) counts as small, unless the limit is 0.
        """
        if self.table_bytes is None:
            return self.side_input_max_mb > 0
        return self.table_bytes <= self.side_input_max_mb << 20

    @property
    def partitions(self) -> int:
        """The CoGroupByKey way's partitions: `num_partitions`, or one per `PARTITION_BYTES`, at least 16."""
        if self.num_partitions is not None:
            return self.num_partitions
        return min(_MAX_PARTITIONS, max(MIN_PARTITIONS, -(-(self.table_bytes or 0) // PARTITION_BYTES)))


Fail = Callable[[str, str], Exception]


def parse_joins(raw: Any, schema: Schema, input_format: str, input_layout: dict, *, fail: Fail,
                take: Callable[[Any, str, dict], dict],
                parse_schema: Callable[[Any, str], tuple[Schema, dict, tuple]]) -> tuple[tuple[JoinSpec, ...], Schema]:
    """The validated `join:` entries and the events' schema with every joined column appended.

    Args:
      raw: the `join:` value (None: no joins).
      schema: the input's schema (the events as read).
      input_format: `input.format`.
      input_layout: the input's delimiter, quote_char, null_values, encoding, list_separator (tables in the
        input's format default to them).
      fail: (key path, message) -> the config error to raise.
      take: `pipelines.config`'s mapping check (unknown keys, types).
      parse_schema: `pipelines.config`'s input.schema parser, reused for a table's `schema:`.

    Raises:
      what `fail` returns, naming the first invalid key: a missing table, key or columns; a key that is
      not one value per event (a label, a float, or not in the events); a joined column that is already
      a column of the events or the key; a label from a table; a table schema whose key dtype differs
      from the events'; layout options that do not fit the table's format.
    """
    if raw is None:
        return (), schema
    if not isinstance(raw, list):
        raise fail("join", "must be a list of tables, e.g. [{table: users.tsv, key: user_id, columns: [age]}]")
    joins = []
    for i, item in enumerate(raw):
        spec = _join(take(item, f"join[{i}]", _KEYS), f"join[{i}]", schema, input_format, input_layout, fail,
                     parse_schema)
        schema = Schema([*schema, *(spec.schema[c] for c in spec.columns)])
        joins.append(spec)
    return tuple(joins), schema


def _join(entry: dict, path: str, events: Schema, input_format: str, layout: dict, fail: Fail,
          parse_schema) -> JoinSpec:
    for required in ("table", "key", "columns"):
        if not entry.get(required):
            raise fail(f"{path}.{required}", "is required")
    key, columns = entry["key"], entry["columns"]
    for j, column in enumerate(columns):
        if not isinstance(column, str):
            raise fail(f"{path}.columns[{j}]", f"must be a column name, got {column!r}")
        if column == key:
            raise fail(f"{path}.columns[{j}]", f"{column!r} is the join key; the events have it already")
        if column in events or columns.index(column) < j:
            raise fail(f"{path}.columns[{j}]", f"{column!r} is already a column of the events (input.schema "
                                               "or an earlier join); a joined column needs a name of its own")
    bad_name = limits.check_feature_names(columns)
    if bad_name is not None:
        raise fail(f"{path}.columns[{bad_name[0]}]", bad_name[1])
    if key not in events:
        raise fail(f"{path}.key", f"{key!r} is not a column of the events ({', '.join(events.names)})")
    event_key = events[key]
    if event_key.kind == "label" or event_key.dtype not in _KEY_DTYPES:
        raise fail(f"{path}.key", f"{key!r} is a {event_key.kind} {event_key.dtype} column; a join key is an id "
                                  f"({'/'.join(_KEY_DTYPES)}), sparse or dense")
    fmt = entry.get("format") or ("tsv" if input_format == "criteo" else input_format)
    if fmt not in LOG_FORMATS or fmt == "criteo":
        formats = ", ".join(f for f in LOG_FORMATS if f != "criteo")
        raise fail(f"{path}.format", f"{fmt!r} is not a table format ({formats})")
    table_schema, nulls, sources = _table_schema(entry, path, fmt, key, event_key, columns, fail, parse_schema)
    same = fmt == input_format
    options: dict[str, Any] = {}
    for name in ("delimiter", "quote_char", "null_values", "encoding", "list_separator"):
        value = entry.get(name)
        if name == "delimiter" and value == "\\t":
            value = "\t"  # YAML keeps "\t" in plain and single-quoted scalars as two characters
        options[name] = value if value is not None else (layout.get(name) if same or name == "list_separator"
                                                         else None)
    if fmt not in DELIMITED_FORMATS:
        given = next((k for k in ("delimiter", "quote_char", "null_values") if entry.get(k) is not None), None)
        if given is not None or nulls:
            raise fail(f"{path}.{given or 'schema'}", f"delimiter, quote_char and null_values apply to "
                                                      f"{', '.join(DELIMITED_FORMATS)} tables, not {fmt!r}")
        for name in ("delimiter", "quote_char", "null_values"):
            options[name] = None
    if fmt == "parquet":
        if entry.get("encoding") is not None:
            raise fail(f"{path}.encoding", "applies to text formats, not 'parquet'")
        options["encoding"] = None
    if entry.get("skip_header") is False and fmt in DELIMITED_FORMATS and entry.get("schema") is None:
        raise fail(f"{path}.schema", "a table without a header (skip_header: false) is read by position: list "
                                     "every column of the file, in order")
    try:
        checked = csv_options(fmt, options["delimiter"], options["quote_char"], options["null_values"], nulls,
                              options["list_separator"] or "|", sources, options["encoding"])
    except ValueError as e:
        named = next((k for k in ("list_separator", "quote_char", "null_values", "delimiter", "encoding")
                      if k in str(e)), "format")
        raise fail(f"{path}.{named}", str(e)) from None
    side_max = entry.get("side_input_max_mb")
    if side_max is not None and side_max < 0:
        raise fail(f"{path}.side_input_max_mb", f"must be >= 0 (0: always CoGroupByKey), got {side_max}")
    partitions = entry.get("num_partitions")
    if partitions is not None and not 0 < partitions <= _MAX_PARTITIONS:
        raise fail(f"{path}.num_partitions", f"must be between 1 and {_MAX_PARTITIONS}, got {partitions}")
    delimited = fmt in DELIMITED_FORMATS
    return JoinSpec(
        table=entry["table"], key=key, columns=tuple(columns), format=fmt, schema=table_schema,
        list_separator=options["list_separator"] or "|", skip_header=entry.get("skip_header"),
        delimiter=checked.delimiter if delimited else None, quote_char=checked.quote_char if delimited else None,
        null_values=checked.null_values if delimited else None, feature_null_values=checked.feature_null_values,
        column_sources=tuple(sources), encoding=checked.encoding,
        side_input_max_mb=DEFAULT_SIDE_INPUT_MAX_MB if side_max is None else side_max, num_partitions=partitions,
    )


def _table_schema(entry: dict, path: str, fmt: str, key: str, event_key: FeatureSpec, columns: list, fail: Fail,
                  parse_schema) -> tuple[Schema, dict, tuple]:
    """What is read from the table: the declared specs, then defaults for the key and undeclared columns."""
    declared, nulls, sources = Schema([]), {}, ()
    if entry.get("schema") is not None:
        try:
            declared, nulls, sources = parse_schema(entry["schema"], fmt)
        except ValueError as e:
            # The input.schema parser names its own key; the same entry here is join[i].schema[k].
            found = re.match(r"config key 'input\.schema([^']*)': (.*)", str(e), flags=re.S)
            raise fail(f"{path}.schema{found[1]}" if found else f"{path}.schema",
                       found[2] if found else str(e)) from None
    for k, spec in enumerate(declared):
        if spec.kind == "label":
            raise fail(f"{path}.schema[{k}]", f"{spec.name!r} is a label; labels come from the events, "
                                              "not a side table")
        if spec.weighted:
            raise fail(f"{path}.schema[{k}]", f"{spec.name!r}: weighted applies to the events' columns, "
                                              "not a side table's")
    if key in declared and declared[key].dtype != event_key.dtype:
        raise fail(f"{path}.schema", f"key {key!r} is {declared[key].dtype} here but {event_key.dtype} in the "
                                     "events; a key joins values of one dtype")
    if entry.get("skip_header") is False and fmt in DELIMITED_FORMATS:
        missing = [name for name in (key, *columns) if name not in declared]
        if missing:
            raise fail(f"{path}.schema", f"lacks {missing[0]!r}: a table without a header is read by position, "
                                         "so schema lists every column of the file, in order")
    defaults = [] if key in declared else [FeatureSpec(key, "dense", event_key.dtype)]
    defaults += [FeatureSpec(c, "sparse", "string") for c in columns if c not in declared]
    return Schema([*declared, *defaults]), nulls, sources
