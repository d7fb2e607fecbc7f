"""The ingest output directory before and after a run: what may be removed, and what a failure leaves.

Nothing a user has in `--output` is ever removed. An ingest removes only:
- the files a previous output's `_MANIFEST.json` lists (with `--overwrite`),
  the manifest first, so the old output stops being readable before any of
  its files goes; a manifest naming a path outside the output (absolute, or
  with `..`) is refused;
- after a killed run (its stale lock, and no manifest), the files under the
  names this run writes and any shard name `part-NNNNN-of-MMMMM` of a shard
  format: an uncommitted write, rolled back whether or not `--overwrite` is
  given. What the lock file lists is never read for this: anyone can write
  one;
- temporaries: `.tmp-*` files and Beam's `beam-temp-*` directories, which
  only a run in progress writes (and the lock shows none is);
- with `--overwrite`, files under exactly the names this run will write.

Any other file in `--output` is refused up front (one line naming it), since
the committed output must be exactly what its manifest lists; so is an
input file that lies inside `--output`.
"""

from __future__ import annotations

import os

from apache_beam.io.filesystems import FileSystems

from pipelines.errors import UsageError
from sparse_io.atomic import TMP_PREFIX
from sparse_io.formats import SHARD_SUFFIXES
from sparse_io.manifest import LOCK_FILE, MANIFEST_FILE, ManifestError, read_manifest
from sparse_io.output_files import parse_shard_name

__all__ = [
    "prepare_output",
    "check_inputs_outside",
    "manifest_files",
    "is_shard_name",
    "roll_back",
    "list_output",
    "is_temporary",
    "recover_dead_letters",
]

_BEAM_TEMP = "beam-temp-"


def is_temporary(relative: str) -> bool:
    """A path (relative to the output) that only a run in progress writes: `.tmp-*` or under `beam-temp-*`."""
    parts = relative.split("/")
    return parts[-1].startswith(TMP_PREFIX) or any(p.startswith(_BEAM_TEMP) for p in parts[:-1])


def _local(directory: str) -> bool:
    return FileSystems.get_scheme(directory) is None


def _join(directory: str, relative: str) -> str:
    return os.path.join(directory, *relative.split("/")) if _local(directory) else FileSystems.join(directory, relative)


def list_output(directory: str) -> list[str]:
    """Every file under `directory` (relative, `/`-separated), the lock file included."""
    if _local(directory):
        if not os.path.isdir(directory):
            return []
        found = []
        for root, _, names in os.walk(directory):
            for name in names:
                found.append(os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/"))
        return sorted(found)
    prefix = directory.rstrip("/") + "/"
    return sorted(m.path[len(prefix):] for r in FileSystems.match([prefix + "**"]) for m in r.metadata_list)


def _remove(directory: str, relatives) -> None:
    relatives = sorted(set(relatives))
    if not relatives:
        return
    if not _local(directory):
        FileSystems.delete([_join(directory, r) for r in relatives])
        return
    parents = set()
    for relative in relatives:
        path = _join(directory, relative)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        parent = os.path.dirname(relative.replace("/", os.sep))
        while parent:
            parents.add(parent)
            parent = os.path.dirname(parent)
    # Directories emptied here (vocab/, errors/, beam-temp-*/) go too; a directory still holding anything stays.
    for parent in sorted(parents, key=lambda p: -p.count(os.sep)):
        try:
            os.rmdir(os.path.join(directory, parent))
        except OSError:
            pass


def _inside(relative) -> bool:
    """Whether a manifest's path names a file inside its directory: relative, `/`-separated, no `..`."""
    if not isinstance(relative, str) or not relative or "\\" in relative or relative.startswith("/"):
        return False
    parts = relative.split("/")
    return ":" not in parts[0] and all(part not in ("", ".", "..") for part in parts)


def manifest_files(directory: str) -> list[str]:
    """The files a committed output at `directory` consists of (its manifest first); [] when uncommitted.

    Raises:
      UsageError: the manifest names a path outside `directory` (or no path), or is malformed
        (`read_manifest`'s ManifestError).
    """
    try:
        manifest = read_manifest(directory)
    except ManifestError as e:
        if MANIFEST_FILE not in list_output(directory):
            return []
        # Written atomically, a manifest of ours is whole: one that does not read as ours directs nothing.
        raise UsageError(f"{e}; no ingest wrote that manifest, so nothing it lists is removed") from None
    entries = [e.get("path") if isinstance(e, dict) else None for e in manifest["shards"] + manifest.get("files", [])]
    outside = [path for path in entries if not _inside(path)]
    if outside:
        raise UsageError(f"{_join(directory, MANIFEST_FILE)} lists {outside[0]!r}, which is not a file inside the "
                         "output; no ingest wrote that manifest, so nothing it lists is removed")
    return [MANIFEST_FILE] + [str(path) for path in entries]


def is_shard_name(relative: str) -> bool:
    """Whether `relative` is a top-level shard name an ingest writes, of any count and shard format."""
    parsed = parse_shard_name(relative)
    return parsed is not None and parsed[2] in SHARD_SUFFIXES


def check_inputs_outside(directory: str, inputs: list[str]) -> None:
    """UsageError when an input file lies inside the output directory (a rerun would replace or remove it)."""
    if _local(directory):
        root = os.path.realpath(directory).rstrip(os.sep) + os.sep
        inside = [p for p in inputs if _local(p) and os.path.realpath(p).startswith(root)]
    else:
        root = directory.rstrip("/") + "/"
        inside = [p for p in inputs if p.startswith(root)]
    if inside:
        raise UsageError(
            f"--input matches {inside[0]!r}, which lies inside --output {directory!r}; move the logs out or write "
            "to another directory"
        )


def _check_local_directory(directory: str) -> None:
    if os.path.islink(directory):
        raise UsageError(f"--output {directory!r} is a symbolic link; give the real directory")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--output {directory!r} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--output {directory!r} is not writable: {e.strerror or e}") from e
    # Whether files can be made in it is learnt from the lock file, the first file an ingest writes.


def check_output_directory(directory: str) -> None:
    """UsageError when a local `directory` is a link or a file; it is created when missing."""
    if _local(directory):
        _check_local_directory(directory)


def prepare_output(directory: str, *, overwrite: bool, owns: list[str], stale: dict | None = None,
                   failure_notes: tuple[str, ...] = ()) -> None:
    """Makes `directory` ready for a fresh ingest; call it holding the output's lock.

    Args:
      directory: the output directory.
      overwrite: replace a committed output (what its manifest lists) and
        files under this run's own names.
      owns: paths relative to `directory` this run may remove: its own
        outputs and the files of the manifest it replaces.
      stale: the lock record of a killed run, or None. When there is one and
        no manifest, the files of `owns` and every shard name
        (`is_shard_name`) are that run's leftovers and go; what the record
        lists is not read.
      failure_notes: files of `owns` a failed run leaves on purpose (its
        dead letters, which say why it failed): when nothing else is there,
        they are replaced without `overwrite`.

    Raises:
      UsageError: a file no ingest wrote is there; the directory holds an
        output (or a failed run's files) and `overwrite` is False.
    """
    previous = manifest_files(directory)
    # A killed run's files are rolled back only while no manifest is there: a run removes the manifest it
    # replaces before anything else, and commits its own last, so a manifest means that run either had not
    # begun or had finished.
    if stale is not None and not previous:
        roll_back(directory, [f for f in list_output(directory) if f in set(owns) or is_shard_name(f)])
    files = [f for f in list_output(directory) if f != LOCK_FILE]
    _remove(directory, [f for f in files if is_temporary(f)])
    files = [f for f in files if not is_temporary(f)]
    if not files:
        return
    if not set(previous) <= set(owns):
        raise UsageError(f"--output {directory!r} was committed by another ingest while this one started; run it again")
    foreign = [f for f in files if f not in set(owns)]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UsageError(
            f"--output {directory!r} holds {foreign[0]!r}{more}, which no ingest wrote there; an output holds only "
            "what its manifest lists, so move it out or write to another directory"
        )
    if not overwrite and not previous and set(files) <= set(failure_notes):
        _remove(directory, files)
        return
    if not overwrite:
        what = "a committed ingest output" if previous else f"{len(files)} file(s) of a failed ingest"
        raise UsageError(f"--output {directory!r} is not empty: it holds {what}; pass --overwrite to replace it")
    # The manifest goes first: from then on the old output is refused by every reader.
    _remove(directory, [MANIFEST_FILE])
    _remove(directory, files)


def roll_back(directory: str, owns: list[str], *, keep: tuple[str, ...] = ()) -> None:
    """Removes what an uncommitted run wrote: the files of `owns` (except `keep`) and every temporary."""
    keep_set = set(keep)
    present = set(list_output(directory))
    _remove(directory, [f for f in owns if f in present and f not in keep_set and f != LOCK_FILE])
    _remove(directory, [f for f in present if is_temporary(f)])


def recover_dead_letters(directory: str, relative: str) -> bool:
    """Moves the dead letters a failed run left in Beam's temporary directory to `relative`; returns whether any.

    The dead-letter sink (`transforms.beam.line_file.WriteLineFile`) writes
    each bundle to `beam-temp-*/<uuid>.<name>` and concatenates them only
    when every bundle is done; on failure they would stay there, so they are
    concatenated to their final name here.
    """
    from transforms.beam.line_file import concatenate_pieces

    target = _join(directory, relative)
    parent = relative.rsplit("/", 1)[0] if "/" in relative else ""
    name = relative.rsplit("/", 1)[-1]
    present = list_output(directory)
    if relative in present:
        return True
    pieces = [
        f for f in present
        if is_temporary(f) and f.startswith(parent + "/" if parent else "") and f.endswith(name)
        and not f.rsplit("/", 1)[-1].startswith(TMP_PREFIX)
    ]
    if not pieces:
        return False
    concatenate_pieces([_join(directory, piece) for piece in pieces], target,
                       output_root=directory if _local(directory) else None)
    return True
