"""Running the whole ingest on a few in-memory lines or records, for assertions on what a config produces.

The run is the real one: `pipelines.ingest.run_ingest`, the entry point of
`python -m pipelines.ingest`, on a temporary log file, writing to a
directory that is then read back with the project's shard reader.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping, Sequence

import pyarrow as pa

from sparse_io import output_files
from sparse_io.formats import LOG_FORMATS, LOG_SUFFIXES
from sparse_io.schema import SCHEMA_FILE, Schema
from sparse_io.stats_file import Stats
from transforms.testing.create_logs import encode_logs

__all__ = ["IngestOutput", "ingest_in_memory"]

_DEAD_LETTERS = os.path.join(output_files.ERRORS_DIR, output_files.DEAD_LETTERS_FILE)


@dataclasses.dataclass
class IngestOutput:
    """What one ingest wrote, read back into memory.

    Attributes:
      shards: one `pa.Table` per shard file, in shard (name) order.
      schema: the `schema.json` written beside the shards.
      stats: the `stats.json` written beside them, as a dict.
      dead_letters: the rejected records (`errors/dead_letters.jsonl`), as
        dicts {"source", "line", "reason", "raw"}.
      summary: the run summary `run_ingest` returned (rows_in, rows_out,
        bad_records, num_shards, ...).
      output_dir: where it was written (None when it was a temporary
        directory, removed since).
    """

    shards: list[pa.Table]
    schema: Schema
    stats: dict
    dead_letters: list[dict]
    summary: dict
    output_dir: str | None

    @property
    def rows(self) -> list[dict]:
        """Every shard's rows as dicts, shard after shard (`pa.Table.to_pylist` form)."""
        return [row for table in self.shards for row in table.to_pylist()]


def _config_file(config, directory: str) -> str | None:
    if config is None:
        return None
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config)
    if isinstance(config, Mapping):
        path = os.path.join(directory, "config.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        return path
    raise TypeError(f"ingest_in_memory: config must be a path or a mapping, got {type(config).__name__}")


def _read_as(config_path: str | None, log_format: str | None) -> tuple[str, Schema]:
    """The log format and schema the ingest will read with (the config's, `log_format` winning)."""
    from pipelines.config import default_criteo_config, load_config

    config = load_config(config_path, format_override=log_format) if config_path else default_criteo_config()
    return log_format or config.format, config.read_schema  # the log holds no joined column


def ingest_in_memory(
    lines_or_records,
    config: str | os.PathLike | Mapping | None = None,
    *,
    log_format: str | None = None,
    output_dir: str | None = None,
    args: Sequence[str] = (),
) -> IngestOutput:
    r"""Runs `python -m pipelines.ingest` on `lines_or_records` and returns what it wrote.

    The lines or records become one log file (see
    `transforms.testing.encode_logs`), the ingest runs in this process on
    the local in-process runner (no Prism, no network) with `--no_report`,
    and the shards, schema.json, stats.json and dead letters are read back.

    Args:
      lines_or_records: the log content, as `CreateLogs` takes it.
      config: an ingest config file (YAML/JSON path) or the same content as
        a mapping; None: the default Criteo config (`--format criteo`).
      log_format: `--format` (overrides the config's `input.format`).
      output_dir: write here and keep it (must be absent or empty); default
        a temporary directory, removed once read back.
      args: more command-line flags for the ingest (e.g.
        `["--direct_num_workers=2"]`).

    Returns: an `IngestOutput` (shards, rows, schema, stats, dead_letters,
    summary).

    Raises: what `run_ingest` raises (`pipelines.errors.UsageError` for an
    exceeded error budget or a bad flag, `pipelines.config.ConfigError` for
    a bad config); `read_tfrecord_shard` needs TensorFlow for TFRecord shards.

    Example:
      >>> lines = ["\t".join([str(i % 2)] + ["1"] * 13 + [f"{i:08x}"] * 26) for i in range(10)]
      >>> out = ingest_in_memory(lines, {"input": {"format": "criteo"},
      ...                                "features": {"C*": {"hash_buckets": 100}},
      ...                                "output": {"num_shards": 2}})
      >>> out.stats["num_rows"], len(out.shards), out.schema["C1"].hash_buckets
      (10, 2, 100)
    """
    from pipelines.ingest import run_ingest
    from sparse_io.shard_set import iter_shards

    with tempfile.TemporaryDirectory(prefix="sparseflow-ingest-") as scratch:
        config_path = _config_file(config, scratch)
        fmt, read_schema = _read_as(config_path, log_format)
        if fmt not in LOG_FORMATS:
            raise ValueError(f"ingest_in_memory: format {fmt!r} is not one of {LOG_FORMATS}")
        log = os.path.join(scratch, "logs", "log" + LOG_SUFFIXES[fmt])
        os.makedirs(os.path.dirname(log))
        with open(log, "wb") as f:
            f.write(encode_logs(lines_or_records, fmt, read_schema))
        out = output_dir if output_dir is not None else os.path.join(scratch, "out")
        argv = ["--input", log, "--output", out, "--no_report", "--progress_seconds", "0"]
        if config_path is not None:
            argv += ["--config", config_path]
        if log_format is not None:
            argv += ["--format", log_format]
        summary = run_ingest([*argv, *args])
        schema = Schema.load(os.path.join(out, SCHEMA_FILE))
        shards = list(iter_shards(out, schema=schema))
        stats = dict(Stats.load(out).data)
        letters_path = os.path.join(out, _DEAD_LETTERS)
        letters = []
        if os.path.exists(letters_path):
            with open(letters_path, encoding="utf-8") as f:
                letters = [json.loads(line) for line in f if line.strip()]
    return IngestOutput(shards, schema, stats, letters, summary, output_dir)
