"""What the data teaches after the fact, merged in as `WriteShards` finishes: schema fields and stats.json sections.

A late update is `(feature, {FeatureSpec field: value})`, known only once
the data was seen (a vocabulary's size and fingerprint, its OOV count), or
`(STATS_SECTIONS, {section: [entry, ...]})`, top-level lists for stats.json
(the joins' counts), or `(AT_READ, {...})`, features derived at read
(`transforms.beam.at_read`: their schema.json and stats.json entries).
`apply_late_updates` folds them into the schema and the stats (rewriting
stats.json when they change it); `updated_schema` sets
FeatureSpec fields on a schema, naming a feature it does not hold.

Example:
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> updated_schema(Schema([FeatureSpec("C1")]), {"C1": {"hash_buckets": 8}}).sparse[0].hash_buckets
  8
"""

from __future__ import annotations

import json

from apache_beam.io.filesystems import FileSystems

from sparse_io.atomic import atomic_write_text
from sparse_io.schema import Schema
from sparse_io.stats_file import stats_json
from transforms.beam.at_read import AT_READ, apply_at_read
from transforms.beam.stats import STATS_FILE

__all__ = ["STATS_SECTIONS", "apply_late_updates", "updated_schema"]

# A late update `(STATS_SECTIONS, {section: [entry dicts]})` adds top-level lists to stats.json, each sorted by
# its entries' "join" number (then their text): the order they arrive in is the runner's.
STATS_SECTIONS = "__stats_sections__"
# Late updates that describe the data, not the schema: they go to stats.json alone.
_STATS_ONLY_UPDATES = ("raw_values", "cross_overflow")


def apply_late_updates(schema: Schema, stats: dict, updates, output_dir: str) -> tuple[Schema, dict]:
    """Schema fields known only once the data was seen (vocabulary sizes, OOV counts), merged in.

    An `oov_ids` count is also recorded in stats.json, beside the feature's other counts; `raw_values`
    (transforms.beam.raw_values) goes to stats.json only.
    """
    merged: dict[str, dict] = {}
    sections: dict[str, list] = {}
    at_read = []
    for name, changes in updates:
        if name == AT_READ:  # features the shards do not hold (transforms.beam.at_read)
            at_read.append(changes)
            continue
        if name == STATS_SECTIONS:  # top-level stats.json lists, one entry per update (the joins' counts)
            for section, entries in changes.items():
                sections.setdefault(section, []).extend(entries)
            continue
        merged.setdefault(name, {}).update(changes)
    in_stats = {n: {k: c.pop(k) for k in _STATS_ONLY_UPDATES if k in c} for n, c in merged.items()}
    schema = updated_schema(schema, {n: c for n, c in merged.items() if c})
    for n, c in merged.items():
        if "oov_ids" in c:
            in_stats[n]["oov_ids"] = c["oov_ids"]
    counted = {n: c for n, c in in_stats.items() if c and n in stats.get("features", {})}
    if counted:
        stats = {**stats, "features": {n: ({**f, **counted[n]} if n in counted else f)
                                       for n, f in stats["features"].items()}}
    if sections:
        stats = {**stats, **{k: sorted(v, key=lambda e: (e.get("join", 0), json.dumps(e, sort_keys=True)))
                             for k, v in sections.items()}}
    if at_read:
        schema, stats = apply_at_read(schema, stats, at_read)
    if counted or sections or at_read:
        atomic_write_text(
            FileSystems.join(output_dir, STATS_FILE), stats_json(stats), output_root=output_dir
        )
    return schema, stats


def updated_schema(schema: Schema, updates: dict[str, dict]) -> Schema:
    """`schema` with each named feature's FeatureSpec fields set; ValueError naming a feature it does not hold."""
    for name, changes in updates.items():
        if name not in schema.names:
            raise ValueError(f"WriteShards: schema_updates names {name!r}, which the batches do not hold "
                             f"(they hold {schema.names})")
        schema = schema.replace(name, **changes)
    return schema
