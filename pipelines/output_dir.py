"""Checks and clears the ingest output directory before anything is written.

Nothing a user already has in `--output` is lost unless they pass
`--overwrite`, and even then only what an ingest writes is removed (shards,
schema.json, stats.json, vocab/, errors/, report.html, temporaries).
"""

from __future__ import annotations

import glob
import os
import shutil
import uuid

from apache_beam.io.filesystems import FileSystems

from pipelines.errors import UsageError

__all__ = ["prepare_output", "INGEST_OUTPUTS"]

INGEST_OUTPUTS = ("part-*", "schema.json", "stats.json", "report.html", "vocab", "errors", ".tmp-*")


def _ingest_outputs(directory: str) -> list[str]:
    found = []
    for pattern in INGEST_OUTPUTS:
        found.extend(glob.glob(os.path.join(glob.escape(directory), pattern)))
    return sorted(found)


def prepare_output(directory: str, *, overwrite: bool) -> None:
    """Makes sure `directory` can take a fresh ingest output.

    Raises:
      UsageError: the directory is a symbolic link, is not writable, is a
        file, or already holds files and `overwrite` is False.
    """
    if FileSystems.get_scheme(directory) is not None:
        existing = FileSystems.match([FileSystems.join(directory, "*")])[0].metadata_list
        if existing and not overwrite:
            raise UsageError(f"--output {directory!r} is not empty; pass --overwrite to replace its contents")
        if existing:
            FileSystems.delete([m.path for m in existing])
        return
    if os.path.islink(directory):
        raise UsageError(f"--output {directory!r} is a symbolic link; give the real directory")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--output {directory!r} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".tmp-probe-{uuid.uuid4().hex[:8]}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"--output {directory!r} is not writable: {e.strerror or e}") from e
    entries = os.listdir(directory)
    if not entries:
        return
    if not overwrite:
        raise UsageError(
            f"--output {directory!r} is not empty ({len(entries)} entries); pass --overwrite to replace "
            "a previous ingest's output"
        )
    for path in _ingest_outputs(directory):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
