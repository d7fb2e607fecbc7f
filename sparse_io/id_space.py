"""Id spaces: how a sparse feature's raw values become ids, fingerprinted so two ingests can be compared.

A model learns one embedding row per id, so training data, held-out data and
serving must map a raw value to the same id. That holds exactly when they
share the feature's id space:

* a hashed feature: its bucket count and salt
  (`hash_fingerprint(buckets, salt)`);
* a cross: its sources, bucket count and per-row cap (`cross_fingerprint(spec)`);
* a vocabulary feature: the bytes of its vocabulary file and its OOV bucket
  count (`vocabulary_fingerprint(text, num_oov_buckets)`).

schema.json records the fingerprint of each sparse feature (`id_space`), and
`check_same_id_spaces` compares two schemas feature by feature.

Example:
  >>> hash_fingerprint(1000, None) == hash_fingerprint(1000, None)
  True
  >>> hash_fingerprint(1000, None) == hash_fingerprint(1001, None)
  False
"""

from __future__ import annotations

import hashlib
import json

from sparse_io.schema import Schema

__all__ = ["IdSpaceMismatch", "hash_fingerprint", "cross_fingerprint", "vocabulary_fingerprint", "check_same_id_spaces",
           "describe"]


class IdSpaceMismatch(ValueError):
    """Two ingests map the raw values of a feature to different ids; the message names the feature."""


def _digest(kind: str, settings: dict, payload: bytes = b"") -> str:
    head = json.dumps({"kind": kind, **settings}, sort_keys=True).encode("utf-8")
    return f"{kind}:sha256:" + hashlib.sha256(head + b"\0" + payload).hexdigest()[:32]


def hash_fingerprint(buckets: int, salt: int | tuple[int, int] | list[int] | None) -> str:
    """The id space of a feature hashed into `buckets` with `salt` (None, an int or two ints)."""
    salt = list(salt) if isinstance(salt, (tuple, list)) else salt
    return _digest("hash", {"buckets": int(buckets), "salt": salt})


def cross_fingerprint(spec) -> str:
    """The id space of a cross (`sparse_io.crosses.CrossSpec`): its sources in order, buckets and per-row cap."""
    return _digest("cross", {"sources": list(spec.sources), "buckets": int(spec.num_bins),
                             "max_per_row": int(spec.max_per_row)})


def vocabulary_fingerprint(text: bytes | str, num_oov_buckets: int) -> str:
    """The id space of a vocabulary file with contents `text` and `num_oov_buckets` OOV ids before its tokens."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return _digest("vocabulary", {"num_oov_buckets": int(num_oov_buckets)}, data)


def describe(schema: Schema, name: str) -> str:
    """A short account of a feature's id space, for error messages."""
    spec = schema[name]
    if spec.id_space:
        return spec.id_space
    if spec.hash_buckets:
        return f"hash_buckets {spec.hash_buckets} (no fingerprint)"
    if spec.vocabulary_size:
        return f"vocabulary_size {spec.vocabulary_size} (no fingerprint)"
    return "no id space recorded"


def check_same_id_spaces(reference: Schema, other: Schema, *, other_name: str = "the other data") -> None:
    """Raises IdSpaceMismatch unless every sparse feature of `reference` has the same id space in `other`.

    A dense feature scaled at ingest (schema.json `transform`) must carry the
    same scale parameters in `other`.

    Features are compared by their `id_space` fingerprints; a schema written
    before fingerprints existed is compared by `hash_buckets` and
    `vocabulary_size`, which is the best it allows.

    Raises:
      IdSpaceMismatch: naming the first feature that differs or is missing.
    """
    for spec in reference.sparse:
        if spec.name not in other:
            raise IdSpaceMismatch(f"feature {spec.name!r}: missing from {other_name}")
        theirs = other[spec.name]
        if spec.id_space or theirs.id_space:
            same = spec.id_space == theirs.id_space
        else:
            same = (spec.hash_buckets, spec.vocabulary_size) == (theirs.hash_buckets, theirs.vocabulary_size)
        if not same:
            raise IdSpaceMismatch(
                f"feature {spec.name!r}: {other_name} maps its raw values to other ids "
                f"({describe(other, spec.name)} vs {describe(reference, spec.name)}); "
                "ingest it with --vocab_from pointing at the training data"
            )
    for spec in reference.dense:
        # A scaled feature has no ids, but its parameters are part of what the model learned from.
        scaled = other[spec.name].transform if spec.name in other else None
        if spec.transform is not None and scaled != spec.transform:
            raise IdSpaceMismatch(
                f"feature {spec.name!r}: {other_name} scales it otherwise ({scaled} vs {spec.transform}); "
                "ingest it with --vocab_from pointing at the training data"
            )
