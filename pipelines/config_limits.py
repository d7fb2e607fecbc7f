"""The bounds an ingest config is held to when it loads, so nothing out of range reaches the run.

Each check takes one value and raises ValueError with a one-line reason;
`pipelines.config` puts the key path in front. The bounds:

* `output.num_shards` at most `MAX_NUM_SHARDS` (10,000). A run whose rows
  cannot fill that many shards keeps only the shards that received rows, at
  most one per row, renumbered `part-i-of-K` with a log line (see
  `transforms.beam.write_shards`), never a stream of empty files.
* `hash_buckets` (under `features` and in `input.schema`) at most
  `MAX_HASH_BUCKETS` (2^62): hashed ids are int64, and every count derived
  from them must stay inside it.
* `input.max_line_bytes` in [1, `MAX_LINE_BYTES_LIMIT`], default
  `DEFAULT_MAX_LINE_BYTES` (16 MiB): a longer line is a dead letter, read
  past in bounded chunks, never held whole.
* feature names: the character set of `sparse_io.paths.check_feature_name`
  (A-Z, a-z, 0-9, "_", ".", "-", not starting with "."), since names become
  file names under the output.
* counts are integers: a float (1e6 in JSON, 1.0e+6 in YAML), a bool or a
  string (YAML reads 1e6 as text) is refused, with a hint.
"""

from __future__ import annotations

from sparse_io.paths import check_feature_name
from sparse_io.readers import DEFAULT_MAX_LINE_BYTES

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "MAX_HASH_BUCKETS",
    "MAX_LINE_BYTES_LIMIT",
    "MAX_NUM_SHARDS",
    "check_at_most",
    "check_feature_names",
    "not_an_integer",
]

MAX_NUM_SHARDS = 10_000
MAX_HASH_BUCKETS = 2**62
MAX_LINE_BYTES_LIMIT = (1 << 31) - 2  # a block of lines is one Arrow binary array (int32 offsets)

_POWERS = {MAX_HASH_BUCKETS: "2^62"}


def check_at_most(value: int | None, high: int) -> None:
    """Raises ValueError when `value` is above `high` (None passes)."""
    if value is not None and value > high:
        bound = _POWERS.get(high, f"{high:,}")
        raise ValueError(f"must be at most {bound}, got {value:,}")


def not_an_integer(value: object) -> str:
    """The reason a non-integer where a count belongs is refused, with a hint for the usual slips."""
    reason = f"must be int, got {type(value).__name__} {value!r}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return f"{reason} (write {int(value)}, without a decimal point or exponent)"
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return reason
        if number.is_integer() and abs(number) < 2**63:
            return f"{reason} (YAML reads {value} as text; write {int(number)})"
    return reason


def check_feature_names(names) -> tuple[int, str] | None:
    """The index and reason of the first feature name outside the documented set, or None."""
    for i, name in enumerate(names):
        try:
            check_feature_name(name)
        except ValueError as e:
            return i, str(e)
    return None
