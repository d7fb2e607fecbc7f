"""What to read and what was written: `FeatureSpec` and `Schema` (schema.json).

Column conventions used by every reader, writer and the tf.data stage:

* a sparse feature `f` is a list column `f` (list<int64> ids, or list<string>
  before hashing/vocabulary); when `weighted`, a parallel list<float32>
  column `f__weights` with the same row lengths;
* a dense feature is a nullable scalar column (float32 or int64);
* the label is a scalar column.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa

from sparse_io import output_files

__all__ = [
    "FeatureSpec",
    "Schema",
    "SchemaError",
    "criteo_schema",
    "weights_column",
    "KINDS",
    "DTYPES",
]

KINDS = ("sparse", "dense", "label")
DTYPES = ("int64", "int32", "float32", "float64", "string")
TIME_UNITS = ("s", "ms", "us")
LABEL_TYPES = ("binary", "integer", "real")
# What a column of a history ingest is (`history_role`); see `FeatureSpec`.
HISTORY_ROLES = ("key", "time", "item", "item_column", "event", "target", "weight")
WEIGHTS_SUFFIX = "__weights"
SCHEMA_FILE = output_files.SCHEMA_FILE
_FORMAT_VERSION = 1


class SchemaError(ValueError):
    """A schema or feature spec is invalid; the message names the key."""


def weights_column(feature: str) -> str:
    """Name of the parallel weights column of a weighted sparse feature."""
    return feature + WEIGHTS_SUFFIX


def _check_derived(spec: FeatureSpec) -> None:
    """The keys of a cross (`cross`, `cross_max_per_row`) and of a shared vocabulary, checked."""
    if isinstance(spec.cross, list):
        object.__setattr__(spec, "cross", tuple(spec.cross))
    if spec.cross is not None and (not isinstance(spec.cross, tuple) or len(spec.cross) < 2
                                   or not all(isinstance(c, str) and c for c in spec.cross)):
        raise SchemaError(f"feature {spec.name!r}: cross must list at least two column names, got {spec.cross!r}")
    if spec.cross is not None and not (spec.is_sparse and spec.hash_buckets):
        raise SchemaError(f"feature {spec.name!r}: a cross is a sparse feature with hash_buckets")
    value = spec.cross_max_per_row
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise SchemaError(f"feature {spec.name!r}: cross_max_per_row must be a positive integer, got {value!r}")
    if spec.shared_vocabulary is not None and (not isinstance(spec.shared_vocabulary, str)
                                               or not spec.shared_vocabulary):
        raise SchemaError(f"feature {spec.name!r}: shared_vocabulary must be a name, got {spec.shared_vocabulary!r}")


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One column to read or write.

    Attributes:
      name: column name.
      kind: "sparse" (variable-length id list), "dense" (one number per row,
        may be missing) or "label".
      dtype: "int64", "int32", "float32", "float64" or "string" (of the ids
        for a sparse feature, of the value otherwise). A value the dtype
        cannot hold exactly is a bad record, never rounded: an integer above
        2**24 that float32 cannot represent must be declared int64 or float64.
      time_unit: a dense int64 timestamp: "s", "ms" or "us" since the Unix
        epoch (UTC). Readers take unix numbers in that unit and ISO-8601 text
        (`2016-01-03`, `2014-04-01T05:26:12.539Z`, offsets such as `+02:00`)
        converted to it; text finer than the unit is a bad record.
      label_type: a label's values: "binary" (0 or 1: clicks; the default
        for integer labels; anything else is a bad record), "integer"
        (counts, ratings, classes) or "real" (the default for float labels).
      vocabulary_size: ids are known to lie in [0, vocabulary_size).
      hash_buckets: ids are (or will be) hashed into this many buckets.
      weighted: a sparse feature carries per-id float32 weights.
      max_length: keep at most this many ids per row (sparse only).
      num_oov_buckets: a vocabulary feature's out-of-vocabulary ids
        `0..num_oov_buckets-1` (its tokens follow them).
      salt: the hash salt of a hashed feature (an int or two), as Keras's
        `Hashing(salt=...)` takes it.
      id_space: a fingerprint of how raw values became ids (hash settings,
        or the vocabulary file's bytes and OOV count; `sparse_io.id_space`):
        two ingests with equal fingerprints give equal values equal ids.
      oov_ids: how many ids of the ingested rows fell in the OOV buckets.
      history_role: in a history ingest's output, what the column is: "key"
        (the grouping column), "time", "item" (the history's item list),
        "item_column" (a list parallel to the item list, describing each
        history item), "event" (a value of the example's own event: user or
        context attributes) or "target" (`target_<item>`, `target_<weight>`,
        `target_<item column>`: the event the example predicts). In the schema
        a history ingest reads its events with, the columns grouping consumes
        ("key", "time", "item", "weight", "item_column"): an event missing
        one of them is a bad record.
      cross: a cross's source columns, in order (`sparse_io.crosses`): its ids are
        `keras.layers.HashedCrossing(hash_buckets)` of their raw values.
      cross_max_per_row: the crosses a row of a cross keeps (list sources multiply).
      shared_vocabulary: the name of the vocabulary (`vocab/<name>.txt`) this feature
        shares with others: one id space, one embedding table.
      transform: a derived feature's source column and mapping, written by the
        ingest (`sparse_io.numeric_maps.DerivedFeature.record`): bucket
        boundaries or scale parameters, applied again by serving.
      at_read: a derived feature the shards do not hold: readers compute it
        from its `transform` and its source column, which the shards do hold
        (`transforms.tfdata.make_dataset`; the ingest's `output.derived`).

    Example:
      >>> FeatureSpec("C1", "sparse", "string", hash_buckets=1000).is_sparse
      True
    """

    name: str
    kind: str = "sparse"
    dtype: str = "int64"
    vocabulary_size: int | None = None
    hash_buckets: int | None = None
    weighted: bool = False
    max_length: int | None = None
    time_unit: str | None = None
    label_type: str | None = None
    num_oov_buckets: int | None = None
    salt: int | tuple[int, int] | None = None
    id_space: str | None = None
    oov_ids: int | None = None
    history_role: str | None = None
    cross: tuple[str, ...] | None = None
    cross_max_per_row: int | None = None
    shared_vocabulary: str | None = None
    transform: dict | None = None
    at_read: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise SchemaError(f"feature name must be a non-empty string, got {self.name!r}")
        if self.name.endswith(WEIGHTS_SUFFIX):
            raise SchemaError(f"feature {self.name!r}: names ending in {WEIGHTS_SUFFIX!r} are reserved")
        if self.kind not in KINDS:
            raise SchemaError(f"feature {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.dtype not in DTYPES:
            raise SchemaError(f"feature {self.name!r}: dtype {self.dtype!r} is not one of {DTYPES}")
        for key in ("vocabulary_size", "hash_buckets", "max_length"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise SchemaError(f"feature {self.name!r}: {key} must be a positive integer, got {value!r}")
        for key in ("num_oov_buckets", "oov_ids"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise SchemaError(f"feature {self.name!r}: {key} must be an integer >= 0, got {value!r}")
        if isinstance(self.salt, list):  # JSON has no tuples
            object.__setattr__(self, "salt", tuple(self.salt))
        if self.cross is not None or self.cross_max_per_row is not None or self.shared_vocabulary is not None:
            _check_derived(self)
        salt_ok = self.salt is None or (isinstance(self.salt, int) and not isinstance(self.salt, bool)) or (
            isinstance(self.salt, tuple) and len(self.salt) == 2 and all(type(v) is int for v in self.salt))
        if not salt_ok:
            raise SchemaError(f"feature {self.name!r}: salt must be an integer or two integers, got {self.salt!r}")
        if self.history_role is not None and self.history_role not in HISTORY_ROLES:
            raise SchemaError(
                f"feature {self.name!r}: history_role {self.history_role!r} is not one of {HISTORY_ROLES}")
        if self.id_space is not None and not isinstance(self.id_space, str):
            raise SchemaError(f"feature {self.name!r}: id_space must be a string, got {self.id_space!r}")
        if self.transform is not None and not isinstance(self.transform, dict):
            raise SchemaError(f"feature {self.name!r}: transform must be an object, got {self.transform!r}")
        if not isinstance(self.at_read, bool) or self.at_read and self.transform is None:
            raise SchemaError(f"feature {self.name!r}: at_read is true only for a derived feature (with a transform), "
                              f"got {self.at_read!r}")
        if not isinstance(self.weighted, bool):
            raise SchemaError(f"feature {self.name!r}: weighted must be true or false, got {self.weighted!r}")
        if self.kind != "sparse" and (self.weighted or self.max_length):
            raise SchemaError(f"feature {self.name!r}: weighted/max_length apply to sparse features only")
        if self.time_unit is not None:
            if self.time_unit not in TIME_UNITS:
                raise SchemaError(f"feature {self.name!r}: time_unit {self.time_unit!r} is not one of {TIME_UNITS}")
            if self.dtype != "int64":
                raise SchemaError(f"feature {self.name!r}: time_unit applies to int64 columns")
        if self.label_type is not None:
            if self.kind != "label":
                raise SchemaError(f"feature {self.name!r}: label_type applies to the label only")
            if self.label_type not in LABEL_TYPES:
                raise SchemaError(f"feature {self.name!r}: label_type {self.label_type!r} is not one of {LABEL_TYPES}")
            if self.label_type != "real" and self.dtype not in ("int64", "int32") or self.dtype == "string":
                raise SchemaError(f"feature {self.name!r}: label_type {self.label_type!r} needs an integer dtype")

    @property
    def binary_label(self) -> bool:
        """A click label: only 0 and 1 are valid (see `label_type`)."""
        if self.kind != "label":
            return False
        if self.label_type is None:
            return self.dtype in ("int64", "int32")
        return self.label_type == "binary"
    @property
    def is_sparse(self) -> bool:
        """True for a sparse feature (a list column of ids)."""
        return self.kind == "sparse"

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of this feature's column."""
        scalar = {
            "int64": pa.int64(),
            "int32": pa.int32(),
            "float32": pa.float32(),
            "float64": pa.float64(),
            "string": pa.string(),
        }[self.dtype]
        return pa.list_(scalar) if self.is_sparse else scalar

    def to_dict(self) -> dict:
        """The spec as schema.json stores it: only the keys that are set."""
        # `is`, not `in`: a count of 0 is information, only None and an unset flag are not.
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items() if v is not None and v is not False}

    @classmethod
    def from_dict(cls, data: dict) -> FeatureSpec:
        """The spec a schema.json entry describes.

        Raises:
          SchemaError: not an object, an unknown or missing key, or an invalid value.
        """
        if not isinstance(data, dict):
            raise SchemaError(f"a feature must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SchemaError(f"feature {data.get('name')!r}: unknown key(s) {unknown}")
        if "name" not in data:
            raise SchemaError("feature: missing key 'name'")
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Schema:
    """An ordered set of `FeatureSpec`s; saved as schema.json beside shards.

    Example:
      >>> s = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items")])
      >>> s.names, s.label.name
      (['label', 'items'], 'label')
    """

    features: tuple[FeatureSpec, ...]

    def __init__(self, features: Iterable[FeatureSpec]):
        features = tuple(features)
        names = [f.name for f in features]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaError(f"schema: duplicate feature name(s) {dupes}")
        if sum(f.kind == "label" for f in features) > 1:
            raise SchemaError("schema: more than one label feature")
        object.__setattr__(self, "features", features)

    def __iter__(self) -> Iterator[FeatureSpec]:
        return iter(self.features)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"schema has no feature {name!r}; it has {self.names}")

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.features)

    @property
    def names(self) -> list[str]:
        """Every feature's name, in schema order."""
        return [f.name for f in self.features]

    @property
    def label(self) -> FeatureSpec | None:
        """The label feature, or None when the schema has none."""
        return next((f for f in self.features if f.kind == "label"), None)

    @property
    def sparse(self) -> list[FeatureSpec]:
        """The sparse features, in schema order."""
        return [f for f in self.features if f.kind == "sparse"]

    @property
    def dense(self) -> list[FeatureSpec]:
        """The dense features, in schema order."""
        return [f for f in self.features if f.kind == "dense"]

    def table_rows(self, name: str) -> int:
        """How many ids sparse feature `name` can hold: the rows its embedding table needs.

        Its `vocabulary_size` when it was looked up in a vocabulary, else its
        `hash_buckets`; ids lie in `[0, table_rows)`.

        Raises:
          KeyError: no feature `name`.
          SchemaError: `name` is not sparse, or the schema gives neither size.

        Example:
          >>> Schema([FeatureSpec("C1", hash_buckets=1000)]).table_rows("C1")
          1000
        """
        spec = self[name]
        if not spec.is_sparse:
            raise SchemaError(f"feature {name!r} is {spec.kind}, not sparse: it has no embedding table")
        size = spec.vocabulary_size or spec.hash_buckets
        if size is None:
            raise SchemaError(f"feature {name!r}: schema.json gives neither vocabulary_size nor hash_buckets")
        return size

    def replace(self, name: str, **changes) -> Schema:
        """A copy with feature `name` changed (e.g. dtype after hashing)."""
        return Schema(dataclasses.replace(f, **changes) if f.name == name else f for f in self.features)

    def select(self, names: Iterable[str]) -> Schema:
        """A schema of just `names`, in this schema's order."""
        wanted = set(names)
        missing = sorted(wanted - set(self.names))
        if missing:
            raise KeyError(f"schema has no feature(s) {missing}; it has {self.names}")
        return Schema(f for f in self.features if f.name in wanted)

    def stored(self) -> Schema:
        """The features the shards hold: every one but those derived at read (`FeatureSpec.at_read`)."""
        return Schema(f for f in self.features if not f.at_read)

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of a record batch holding these features (weights after their ids)."""
        fields = []
        for f in self.features:
            fields.append(pa.field(f.name, f.arrow_type()))
            if f.weighted:
                fields.append(pa.field(weights_column(f.name), pa.list_(pa.float32())))
        return pa.schema(fields)

    @classmethod
    def from_arrow(
        cls,
        arrow: pa.Schema | pa.Table | pa.RecordBatch,
        label: str | None = "label",
        *,
        skip_unsupported: bool = False,
    ) -> Schema:
        """The schema of Arrow data that came without one: the one rule every reader and writer uses.

        * a list column is a sparse feature; its ids keep int64, int32 and
          string (large string as string); other integers below 2**63 widen to
          int64 and floats read as float32;
        * a list column `f__weights` beside a list column `f` is `f`'s weights
          (`f` is then `weighted`), never a feature of its own;
        * the scalar column named `label` is the label, every other scalar
          column is dense; int64, int32, float64 and string keep their type
          (a float64 label is not narrowed: that would round it), other
          integers below 2**63 widen to int64, float32, float16 and bool read
          as float32.

        Args:
          arrow: a `pa.Schema`, or a table or record batch (its schema is used).
          label: the name of the label column (None: no label).
          skip_unsupported: leave out columns no feature can describe (maps,
            structs, binary, timestamps, uint64, a `f__weights` column without
            `f`) instead of raising: for readers that select some columns and
            must not fail on others.

        Raises:
          ValueError: a column no feature can describe (naming it and its type),
            unless `skip_unsupported`.

        Example:
          >>> arrow = pa.schema([("label", pa.float64()), ("age", pa.int32()),
          ...                    ("items", pa.list_(pa.int64())), ("items__weights", pa.list_(pa.float32()))])
          >>> [(f.name, f.kind, f.dtype, f.weighted) for f in Schema.from_arrow(arrow)]
          [('label', 'label', 'float64', False), ('age', 'dense', 'int32', False), ('items', 'sparse', 'int64', True)]
        """
        schema = arrow if isinstance(arrow, pa.Schema) else arrow.schema
        names = set(schema.names)
        features = []
        for field in schema:
            if field.name.endswith(WEIGHTS_SUFFIX):
                base = field.name[: -len(WEIGHTS_SUFFIX)]
                if base in names and _is_list(schema.field(base).type):
                    continue  # attached to its feature below
                if skip_unsupported:
                    continue
                raise ValueError(f"column {field.name!r} holds weights but there is no list column {base!r} for them")
            if _is_list(field.type):
                dtype = _arrow_dtype(field.type.value_type, sparse=True)
                spec = None if dtype is None else FeatureSpec(
                    field.name, "sparse", dtype, weighted=weights_column(field.name) in names
                )
            else:
                dtype = _arrow_dtype(field.type, sparse=False)
                kind = "label" if field.name == label else "dense"
                spec = None if dtype is None else FeatureSpec(field.name, kind, dtype)
            if spec is not None:
                features.append(spec)
            elif not skip_unsupported:
                raise ValueError(f"column {field.name!r} has type {field.type}, which shards cannot hold")
        return cls(features)

    def to_json(self) -> str:
        """The schema.json text (indented, with its format version)."""
        return json.dumps(
            {"format_version": _FORMAT_VERSION, "features": [f.to_dict() for f in self.features]},
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> Schema:
        """The schema a schema.json text describes.

        Raises:
          SchemaError: invalid JSON, a missing `features` list, an unsupported format version or a bad feature.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema.json is not valid JSON: {e}") from e
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data) -> Schema:
        """The schema a parsed schema.json (or a manifest's copy of it) describes.

        Raises:
          SchemaError: a missing `features` list, an unsupported format version or a bad feature.
        """
        if not isinstance(data, dict) or "features" not in data:
            raise SchemaError("schema.json: missing key 'features'")
        if data.get("format_version", _FORMAT_VERSION) != _FORMAT_VERSION:
            raise SchemaError(f"schema.json: unsupported format_version {data['format_version']!r}")
        if not isinstance(data["features"], list):
            raise SchemaError("schema.json: 'features' must be a list")
        return cls(FeatureSpec.from_dict(f) for f in data["features"])

    def save(self, directory: str, *, output_root: str | None = None) -> str:
        """Writes `directory/schema.json` atomically; returns its path.

        `output_root`: the output directory the file must stay in, symbolic
        links followed (see `sparse_io.atomic`).
        """
        from sparse_io.atomic import atomic_write_text

        path = os.path.join(directory, SCHEMA_FILE)
        atomic_write_text(path, self.to_json() + "\n", output_root=output_root)
        return path

    @classmethod
    def load(cls, path: str) -> Schema:
        """Loads a schema.json file, or `path/schema.json` for a directory."""
        from apache_beam.io.filesystems import FileSystems

        if not path.endswith(".json"):
            path = FileSystems.join(path, SCHEMA_FILE)
        with FileSystems.open(path) as f:
            return cls.from_json(f.read().decode("utf-8"))


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _arrow_dtype(t: pa.DataType, *, sparse: bool) -> str | None:
    """The schema dtype of Arrow type `t` (of a list's ids when `sparse`, of a scalar otherwise); None: none fits."""
    if pa.types.is_int64(t) or pa.types.is_int32(t):
        return str(t)
    if pa.types.is_integer(t):
        return None if pa.types.is_uint64(t) else "int64"  # uint64 may not fit in int64
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_float64(t) and not sparse:
        return "float64"
    if pa.types.is_floating(t) or (pa.types.is_boolean(t) and not sparse):
        return "float32"
    return None


def criteo_schema(*, label: bool = True) -> Schema:
    """The Criteo display-advertising layout: label, I1..I13 dense, C1..C26 hex ids.

    The categorical features are read as one-element (or empty) string lists
    holding the 8-digit hex value; hash or look them up downstream.
    """
    features = [FeatureSpec("label", "label", "int64")] if label else []
    features += [FeatureSpec(f"I{i}", "dense", "float32") for i in range(1, 14)]
    features += [FeatureSpec(f"C{i}", "sparse", "string") for i in range(1, 27)]
    return Schema(features)
