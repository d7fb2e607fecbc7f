"""Shared vocabularies of an ingest config: `vocabulary: {shared: NAME}` on several features.

    features:
      his_cate: {vocabulary: {shared: cate}}
      cate_id: {vocabulary: {shared: cate}}

Every feature naming the same vocabulary is counted into ONE file,
`vocab/NAME.txt` (count over all of them, descending; ties by value
ascending), and looked up in it: one id space, recorded in schema.json
(`shared_vocabulary: NAME` on each member, the same `id_space` fingerprint),
one embedding table in the trainer. The members must agree on
`min_frequency`, `top_k` and `num_oov_buckets`, hold the same kind of value
(strings, or integers), and NAME must not be the name of another feature's
own vocabulary file.

Example:
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> from pipelines.config import FeaturePlan
  >>> schema = Schema([FeatureSpec("a", dtype="string"), FeatureSpec("b", dtype="string")])
  >>> plans = [FeaturePlan("a", use_vocabulary=True, shared_vocabulary="ab"),
  ...          FeaturePlan("b", use_vocabulary=True, shared_vocabulary="ab", top_k=5)]
  >>> check_shared_vocabularies(plans, schema)
  Traceback (most recent call last):
  ...
  pipelines.config_shared.SharedKeyError: vocabulary 'ab' is shared by 'a' (top_k None) and 'b' (top_k 5); \
give every feature of a shared vocabulary the same min_frequency, top_k and num_oov_buckets
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines import config_limits as limits
from sparse_io.schema import Schema

__all__ = ["SharedKeyError", "check_shared_vocabularies", "shared_groups", "vocabulary_file_name"]

_SETTINGS = ("min_frequency", "top_k", "num_oov_buckets")


class SharedKeyError(ValueError):
    """A shared vocabulary is misconfigured: `path` is the config key at fault, the message says why."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


def vocabulary_file_name(plan) -> str:
    """The vocabulary file (without `.txt`) a feature plan is counted into: its shared name, or its own."""
    return plan.shared_vocabulary or plan.name


def shared_groups(plans: Sequence) -> dict[str, list[str]]:
    """Shared vocabulary name -> its member features, in plan order."""
    groups: dict[str, list[str]] = {}
    for plan in plans:
        if plan.shared_vocabulary:
            groups.setdefault(plan.shared_vocabulary, []).append(plan.name)
    return groups


def _kind(schema: Schema, name: str) -> str:
    dtype = schema[name].dtype if name in schema else "string"
    return "string" if dtype == "string" else "integer" if dtype in ("int64", "int32") else dtype


def check_shared_vocabularies(plans: Sequence, schema: Schema) -> None:
    """Refuses shared vocabularies whose members disagree, or whose name is another feature's vocabulary.

    Raises:
      SharedKeyError: naming `features.<member>.vocabulary.shared`.
    """
    by_name = {p.name: p for p in plans}
    for shared, members in shared_groups(plans).items():
        path = f"features.{members[-1]}.vocabulary.shared"
        bad = limits.check_feature_names([shared])
        if bad is not None:
            raise SharedKeyError(path, f"{shared!r} names the file vocab/{shared}.txt: {bad[1]}")
        first = by_name[members[0]]
        for member in members[1:]:
            plan = by_name[member]
            for key in _SETTINGS:
                if getattr(plan, key) != getattr(first, key):
                    raise SharedKeyError(
                        f"features.{member}.vocabulary.shared",
                        f"vocabulary {shared!r} is shared by {first.name!r} ({key} {getattr(first, key)}) and "
                        f"{member!r} ({key} {getattr(plan, key)}); give every feature of a shared vocabulary the "
                        "same min_frequency, top_k and num_oov_buckets")
            if _kind(schema, member) != _kind(schema, first.name):
                raise SharedKeyError(
                    f"features.{member}.vocabulary.shared",
                    f"vocabulary {shared!r} is shared by {first.name!r} ({_kind(schema, first.name)} values) and "
                    f"{member!r} ({_kind(schema, member)} values); one vocabulary holds one kind of value")
        own = by_name.get(shared)
        if own is not None and own.use_vocabulary and own.shared_vocabulary != shared:
            raise SharedKeyError(path, f"{shared!r} is also the feature {shared!r}'s own vocabulary file; "
                                       "name the shared vocabulary differently")
