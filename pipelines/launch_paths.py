"""Local paths made absolute once, at launch, before the Beam graph is built.

A worker resolves a relative path against its own working directory, which on
a separate worker (Beam's Fn API workers, Dataflow) is not the launcher's:
`--input day.tsv` would match nothing there. So the launcher turns every
relative local path it hands the graph into an absolute one; URLs (gs://,
s3://, ...) are left as they are.
"""

from __future__ import annotations

import dataclasses
import os

from apache_beam.io.filesystems import FileSystems

from pipelines.config import IngestConfig

__all__ = ["absolute_local", "resolve_config_paths"]


def absolute_local(path: str) -> str:
    """`path` made absolute against the current directory when it is local; a URL unchanged.

    Glob characters are kept: a pattern stays a pattern.

    Example:
      >>> absolute_local("gs://bucket/logs/*.tsv")
      'gs://bucket/logs/*.tsv'
      >>> absolute_local("/data/day.tsv")
      '/data/day.tsv'
      >>> os.path.isabs(absolute_local("logs/*.tsv"))
      True
    """
    if FileSystems.get_scheme(path) is not None:
        return path
    return os.path.abspath(os.path.expanduser(path))


def resolve_config_paths(config: IngestConfig) -> IngestConfig:
    """`config` with its paths (`vocab_from`, `histories.context_from`, `join[i].table`) made absolute."""
    if config.vocab_from:
        config = dataclasses.replace(config, vocab_from=absolute_local(config.vocab_from))
    h = config.histories
    if h is not None and h.context_from:
        h = dataclasses.replace(h, context_from=absolute_local(h.context_from))
        config = dataclasses.replace(config, histories=h)
    if config.joins:
        config = dataclasses.replace(config, joins=tuple(
            dataclasses.replace(j, table=absolute_local(j.table)) for j in config.joins))
    return config
