"""The last step of `WriteShards`, once every shard is written: complete the set, clean up, record what was written.

`finalize` writes the shards that got no rows (empty), or, when the rows
could not fill `num_shards`, keeps only those that got rows, renumbered
(`fit_to_rows`); deletes `part-*` files of an earlier run and crashed runs'
temporaries; merges the late updates (`transforms.beam.late_updates`);
writes schema.json; and leaves the write records (`sparse_io.write_records`)
from which the commit builds the manifest without reading the files back.
It returns `{"shards": [paths], "num_rows", "schema", "stats",
"stats_features"}`.

Example:
  >>> import tempfile
  >>> fit_to_rows({0: ("a", 5, "0" * 8, 10)}, 2, tempfile.mkdtemp(), ".parquet")
  ({0: ('a', 5, '00000000', 10)}, 2)
"""

from __future__ import annotations

import logging

from apache_beam.io.filesystems import FileSystems

from sparse_io.atomic import atomic_write_text, remove_stale_temporaries
from sparse_io.formats import SHARD_SUFFIX
from sparse_io.output_files import shard_name
from sparse_io.schema import SCHEMA_FILE
from sparse_io.stats_file import stats_json
from sparse_io.write_records import WRITE_RECORDS_FILE, take_record, text_record, write_records_text
from transforms.beam import shard_writer
from transforms.beam.late_updates import apply_late_updates
from transforms.beam.shard_writer import written_record
from transforms.beam.stats import STATS_FILE

__all__ = ["finalize", "fit_to_rows"]

_LOGGER = logging.getLogger("sparseflow.WriteShards")


def finalize(
    written,
    output_dir,
    format,
    num_shards,
    schema,
    row_group_size,
    compression,
    stats,
    computed_shards=None,
    inferred_schema=None,
    late_updates=None,
) -> dict:
    """The output dict of `WriteShards`, once every file is in place (see the module doc); run once (`CallOnce`).

    `written`: the `Written` tuple of every shard written. `computed_shards`, `inferred_schema` and
    `late_updates` are the side inputs standing for what `WriteShards` was not given.
    """
    shards = num_shards or computed_shards
    schema = schema or inferred_schema
    if late_updates:
        schema, stats = apply_late_updates(schema, stats, late_updates, output_dir)
    suffix = SHARD_SUFFIX[format]
    done = {index: (path, rows, crc, size) for index, path, rows, crc, size in written}
    done, shards = fit_to_rows(done, shards, output_dir, suffix)
    for index in range(shards):
        if index not in done:
            path = FileSystems.join(output_dir, shard_name(index, shards, suffix))
            # The columns the other shards hold: features derived at read are schema.json's alone.
            rows = shard_writer.write_shard_file(path, format, [], schema.stored(), row_group_size, output_dir,
                                                 compression)
            done[index] = (path, rows, *written_record(path))
    keep = {path for path, *_ in done.values()}
    pattern = FileSystems.join(output_dir, "part-*-of-*")
    stale = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list if m.path not in keep]
    if stale:
        FileSystems.delete(stale)
    remove_stale_temporaries(output_dir)
    schema.save(output_dir, output_root=output_dir)
    # The commit assembles the manifest from these records instead of reading the shards back.
    shard_records = {FileSystems.split(path)[1]: {"rows": rows, "bytes": size, "crc32c": crc}
                     for path, rows, crc, size in done.values()}
    crc, size = written_record(FileSystems.join(output_dir, SCHEMA_FILE))
    # stats.json was written (maybe on another worker) from the dict this stage holds: its bytes follow from it.
    stats_crc, stats_size = text_record(stats_json(stats))
    records = write_records_text(shard_records, {SCHEMA_FILE: {"bytes": size, "crc32c": crc},
                                                 STATS_FILE: {"bytes": stats_size, "crc32c": stats_crc}})
    path = FileSystems.join(output_dir, WRITE_RECORDS_FILE)
    atomic_write_text(path, records, output_root=output_dir)
    take_record(path)  # the records' own record: nobody commits this temporary
    return {
        "shards": [done[i][0] for i in range(shards)],
        "num_rows": sum(rows for _, rows, *_ in done.values()),
        "schema": FileSystems.join(output_dir, SCHEMA_FILE),
        "stats": FileSystems.join(output_dir, STATS_FILE),
        "stats_features": sorted(stats["features"]),
    }


def fit_to_rows(done: dict, shards: int, output_dir: str, suffix: str) -> tuple[dict, int]:
    """`(done, shards)`, with only the shards that got rows, renumbered, when the rows cannot fill `shards`."""
    rows = sum(value[1] for value in done.values())
    if rows >= shards:
        return done, shards
    filled = [index for index in sorted(done) if done[index][1] > 0]
    kept = max(1, len(filled))
    renumbered = {}
    for new, old in enumerate(filled):
        path, *rest = done[old]
        target = FileSystems.join(output_dir, shard_name(new, kept, suffix))
        FileSystems.rename([path], [target])
        renumbered[new] = (target, *rest)
    _LOGGER.warning("num_shards %d is more than the %d rows can fill: wrote %d shards", shards, rows, kept)
    return renumbered, kept
