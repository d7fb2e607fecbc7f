"""The ingest's side-table joins (`join:` in the config): graph steps, launch-time sizing, stats.json entries.

`join_side_tables` adds one `transforms.beam.join_tables.JoinSideTable` per
`join:` entry, in order, right after the logs are read (and, for a history
ingest, before grouping), so the joined columns are ordinary columns for every
later step. Which way a table is joined is decided at launch from its size
(`size_join_tables`): at most `side_input_max_mb` MiB (default 64) as a side
input, larger through CoGroupByKey.

stats.json gets, per join, one entry of the top-level list `joins`::

  {"join": 0, "table": "/abs/users.tsv", "key": "user_id", "columns": ["age", "occupation"],
   "way": "side_input" | "co_group_by_key", "rows_matched": 990, "rows_unmatched": 10}

An event counts as unmatched when its key is missing or not in the table.
"""

from __future__ import annotations

import dataclasses

from apache_beam.io.filesystems import FileSystems

from pipelines.config import ConfigError, IngestConfig
from pipelines.config_join import JoinSpec
from pipelines.launch_paths import absolute_local

__all__ = ["join_side_tables", "size_join_tables", "join_stats_entry"]


def join_stats_entry(index: int, join: JoinSpec, counts: dict) -> tuple[str, dict]:
    """The late update (`transforms.beam.late_updates.STATS_SECTIONS`) holding join `index`'s counts."""
    from transforms.beam.late_updates import STATS_SECTIONS

    entry = {"join": index, "table": join.table, "key": join.key, "columns": list(join.columns),
             "way": "side_input" if join.side_input else "co_group_by_key", **counts}
    return STATS_SECTIONS, {"joins": [entry]}


def join_side_tables(batches, joins: tuple[JoinSpec, ...]):
    """`batches` with every join's columns appended, and the PCollections of their stats.json updates.

    Returns: (PCollection[pa.RecordBatch], [PCollection of one late update per join]).
    """
    import apache_beam as beam

    from transforms.beam.join_tables import JoinSideTable

    updates = []
    for i, join in enumerate(joins):
        joined = batches | f"Join{i}" >> JoinSideTable(
            join.table, join.key, join.columns, format=join.format, schema=join.schema,
            read_options=join.read_options(), side_input=join.side_input, num_partitions=join.partitions,
        )
        batches = joined["events"]
        updates.append(joined["counts"] | f"Join{i}Stats" >> beam.Map(
            lambda counts, index, spec: join_stats_entry(index, spec, counts), i, join))
    return batches, updates


def size_join_tables(config: IngestConfig) -> tuple[IngestConfig, list]:
    """`config` with each join's table absolute and its `table_bytes` set; the tables' files (FileMetadata).

    Local table paths are made absolute (`absolute_local`), as --input is.

    Raises:
      ConfigError: a table pattern that matches no file, or cannot be listed (naming `join[i].table`).
    """
    joins, files = [], []
    for i, join in enumerate(config.joins):
        try:
            matched = FileSystems.match([absolute_local(join.table)])[0].metadata_list
        except Exception as e:  # the filesystem's own error says why (bad bucket, no credentials)
            raise ConfigError(f"config key 'join[{i}].table': {join.table!r} could not be listed: {e}") from None
        if not matched:
            raise ConfigError(f"config key 'join[{i}].table': {join.table!r} matches no files")
        files += matched
        size = sum(m.size_in_bytes for m in matched)
        joins.append(dataclasses.replace(join, table=absolute_local(join.table), table_bytes=size))
    return dataclasses.replace(config, joins=tuple(joins)), files
