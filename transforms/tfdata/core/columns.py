"""What the input stage reads: the columns picked from a schema, with their dtypes.

Shared by the Parquet, TFRecord and raw-log readers so the three hand out the
same element structure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from sparse_io.numeric_maps import DerivedFeature, derived_of_feature
from sparse_io.schema import Schema, weights_column

__all__ = ["Column", "select_columns", "MISSING_INT", "DENSE_DTYPES", "dense_dtype"]

# A missing value of an integer dense feature (an int64 has no NaN): the int64 minimum.
MISSING_INT = int(np.iinfo(np.int64).min)
DENSE_DTYPES = ("float32", "float64", "int64")


def dense_dtype(dtype: str) -> str:
    """The dtype a dense feature of schema dtype `dtype` is delivered as.

    Integers stay integers, exactly (int32 widened to int64), float64 stays
    float64; float32 (and a string column, which cannot be delivered dense)
    is float32.
    """
    if dtype in ("int64", "int32"):
        return "int64"
    return "float64" if dtype == "float64" else "float32"


@dataclasses.dataclass(frozen=True)
class Column:
    """One feature to deliver.

    Attributes:
      name: feature name (the key in the features dict).
      kind: "sparse", "dense" or "label".
      dtype: the schema's dtype: "int64", "int32", "float32", "float64" or
        "string" (ids of a sparse feature; the label's type). A dense
        feature is delivered as `dense_dtype(dtype)`: float32 or float64 with
        NaN where missing, int64 (exact) with `MISSING_INT` where missing.
      weighted: a sparse feature with a `<name>__weights` column.
      derived: for a feature the shards do not hold (schema.json's
        `at_read`), how it is computed from its source column; None for a
        stored column.
    """

    name: str
    kind: str
    dtype: str
    weighted: bool = False
    derived: DerivedFeature | None = None

    @property
    def weights_name(self) -> str:
        """The key of the feature's weights column, `<name>__weights` (`schema.weights_column`)."""
        return weights_column(self.name)

    @property
    def is_sparse(self) -> bool:
        """True for a sparse (id list) feature, False for a dense feature or the label."""
        return self.kind == "sparse"


def select_columns(
    schema: Schema, features: Sequence[str] | None, label: str | None | bool
) -> tuple[list[Column], Column | None]:
    """Picks the features and the label to deliver.

    Args:
      schema: what the shards hold.
      features: names of sparse or dense features; None means every
        non-label feature of the schema, in schema order.
      label: a column name, None for the schema's label feature, or False for
        no label (elements are then the features dict alone).

    Returns:
      `(feature_columns, label_column or None)`.

    Raises:
      ValueError: an unknown name, a weights column or the label named as a
        feature, or label=None with no label in the schema.
    """
    if label is None:
        if schema.label is None:
            raise ValueError(
                f"the schema has no label feature (features: {schema.names}); "
                "pass label=<column name>, or label=False for features alone"
            )
        label_name: str | None = schema.label.name
    elif label is False:
        label_name = None
    elif isinstance(label, str):
        if label not in schema:
            raise ValueError(f"label {label!r} is not in the schema; it has {schema.names}")
        label_name = label
    else:
        raise ValueError(f"label must be a column name, None or False, got {label!r}")

    if features is None:
        names = [f.name for f in schema if f.kind != "label" and f.name != label_name]
    else:
        if isinstance(features, str):
            raise ValueError(f"features must be a list of names, got the string {features!r}")
        names = list(features)
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"features: duplicate name(s) {dupes}")
    columns = []
    for name in names:
        if name not in schema:
            raise ValueError(f"feature {name!r} is not in the schema; it has {schema.names}")
        if name == label_name:
            raise ValueError(f"feature {name!r} is the label; it cannot also be a feature")
        spec = schema[name]
        if spec.kind == "label":
            raise ValueError(f"feature {name!r} is a label column; pass it as label=")
        derived = derived_of_feature(spec) if spec.at_read else None
        columns.append(Column(spec.name, spec.kind, spec.dtype, bool(spec.weighted), derived))
    label_column = None
    if label_name is not None:
        spec = schema[label_name]
        if spec.kind == "sparse":
            raise ValueError(f"label {label_name!r} is a sparse feature; a label is one number per row")
        dtype = spec.dtype if spec.dtype in ("int64", "float32", "int32") else "float32"
        label_column = Column(spec.name, "label", dtype)
    if not columns and label_column is None:
        raise ValueError("nothing to read: no features and no label")
    return columns, label_column
