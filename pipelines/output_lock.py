"""One writer at a time per output directory: an exclusive lock file, taken before anything is written.

The lock is `OUTPUT/_INGEST.lock`, taken by `pipelines.ingest` and
`pipelines.convert` alike: a small JSON record of who holds it (program,
host, pid, start time) and, for whoever reads it, which files the run means
to write (`owns`). Its contents never direct a deletion: the run after a
killed one recognises the leftovers by the names an ingest writes
(`pipelines.output_dir`), since anyone can write a lock file. It is created
so that exactly one creator can succeed:

- local paths: `open(O_CREAT | O_EXCL)`, atomic on POSIX file systems. A
  lock whose pid is no longer running on this same host is stale (its run
  was killed) and is taken over.
- gs:// paths: an object upload with the precondition `if_generation_match=0`
  (Cloud Storage accepts it only when no object of that name exists). A
  stale lock is detected the same way when its host is this host; a lock
  left by a killed run on another machine must be removed by hand (the
  error says which object).

The lock is released (deleted) when the run ends, whatever the outcome; a
SIGKILL leaves it behind, stale.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import socket

from pipelines.errors import UsageError
from sparse_io.locations import is_remote
from sparse_io.manifest import LOCK_FILE

__all__ = ["LOCK_FILE", "OutputLock", "acquire_output_lock"]

_PROGRAMS = ("ingest", "convert")


@dataclasses.dataclass
class OutputLock:
    """A held lock on an output directory.

    Attributes:
      path: the lock file.
      owns: paths relative to the output that this run means to write.
      stale: the record of the killed run whose lock was taken over, or
        None. What it says it owned is information, not a list to delete.
    """

    path: str
    owns: list[str]
    stale: dict | None
    _release: object = dataclasses.field(repr=False, default=None)

    def release(self) -> None:
        """Deletes the lock file (idempotent)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _record(owns: list[str], program: str) -> dict:
    return {
        "program": program,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "owns": list(owns),
    }


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _is_stale(record: dict | None) -> bool:
    """A lock whose process is known dead: same host, pid not running. Unreadable locks are not stale."""
    if not isinstance(record, dict) or record.get("host") != socket.gethostname():
        return False
    pid = record.get("pid")
    return isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid)


def _held(path: str, record: dict | None) -> UsageError:
    who = (
        f"pid {record.get('pid')} on {record.get('host')}, since {record.get('started')}"
        if isinstance(record, dict) else "an unreadable lock"
    )
    program = record.get("program") if isinstance(record, dict) else None
    program = program if program in _PROGRAMS else "ingest"  # locks written before convert took one are an ingest's
    return UsageError(
        f"another {program} is writing to this output ({who}): {path} exists; wait for it to finish, or remove "
        f"that file if no {program} is running"
    )


def _parse(data: bytes) -> dict | None:
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _acquire_local(directory: str, owns: list[str], program: str) -> OutputLock:
    path = os.path.join(directory, LOCK_FILE)
    payload = json.dumps(_record(owns, program)).encode("utf-8")
    stale = None
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            try:
                with open(path, "rb") as f:
                    found = _parse(f.read())
            except FileNotFoundError:  # released between our create and our read: try again
                continue
            if not _is_stale(found):
                raise _held(path, found) from None
            stale = found
            # Two runs may both see the same stale lock; only one rename of it succeeds.
            claimed = f"{path}.stale-{os.getpid()}"
            try:
                os.rename(path, claimed)
            except FileNotFoundError:
                continue
            with open(claimed, "rb") as f:
                taken = _parse(f.read())
            if taken != found:  # we took a live lock made after our read: put it back
                os.rename(claimed, path)
                raise _held(path, taken) from None
            os.remove(claimed)
            continue
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UsageError(f"{path} is a symbolic link; refusing to lock through it") from None
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise UsageError(f"--output {directory!r} is not writable: {e.strerror}") from None
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(payload)

        def release():
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

        return OutputLock(path, list(owns), stale, release)
    raise _held(path, None)


def _gcs_blob(path: str, client):
    bucket, _, name = path[len("gs://"):].partition("/")
    if client is None:
        from google.cloud import storage

        client = storage.Client()
    return client.bucket(bucket).blob(name)


def _acquire_gcs(directory: str, owns: list[str], program: str, client=None) -> OutputLock:
    from google.api_core.exceptions import NotFound, PreconditionFailed

    path = directory.rstrip("/") + "/" + LOCK_FILE
    blob = _gcs_blob(path, client)
    payload = json.dumps(_record(owns, program))
    stale = None
    for _ in range(2):
        try:
            blob.upload_from_string(payload, content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            try:
                blob.reload()
                generation = blob.generation
                found = _parse(blob.download_as_bytes(if_generation_match=generation))
            except (NotFound, PreconditionFailed):  # released or replaced meanwhile: try again
                continue
            if not _is_stale(found):
                raise _held(path, found) from None
            stale = found
            try:  # only the one who deletes this very generation takes the lock over
                blob.delete(if_generation_match=generation)
            except (NotFound, PreconditionFailed):
                continue
            continue
        def release(generation=blob.generation):
            try:
                blob.delete(if_generation_match=generation)
            except (NotFound, PreconditionFailed):
                pass

        return OutputLock(path, list(owns), stale, release)
    raise _held(path, None)


def acquire_output_lock(directory: str, owns: list[str], *, program: str = "ingest", gcs_client=None) -> OutputLock:
    """Takes the output's lock, or raises UsageError at once when another live ingest or convert holds it.

    Args:
      directory: the output directory (created when missing, local paths).
      owns: paths relative to `directory` this run means to write, recorded
        in the lock for whoever looks (never used to delete anything).
      program: "ingest" or "convert", named to a run the lock keeps out.
      gcs_client: a `google.cloud.storage.Client` for gs:// outputs (None:
        the default client).

    Returns:
      The held `OutputLock` (a context manager releasing it).

    Raises:
      UsageError: another ingest or convert holds the lock (one line naming it), or the
        lock path is a symbolic link.

    Example:
      >>> import os, tempfile
      >>> out = os.path.join(tempfile.mkdtemp(), "train")
      >>> with acquire_output_lock(out, ["part-00000-of-00001.parquet"]):
      ...     os.listdir(out)  # held while the output is written
      ['_INGEST.lock']
      >>> os.listdir(out)  # released: the lock file is gone
      []
    """
    if program not in _PROGRAMS:
        raise ValueError(f"program must be one of {list(_PROGRAMS)}, got {program!r}")
    if directory.startswith("gs://"):
        return _acquire_gcs(directory, owns, program, gcs_client)
    if is_remote(directory):
        raise UsageError(f"{directory!r}: only local and gs:// outputs can be locked against a second writer")
    os.makedirs(directory, exist_ok=True)
    return _acquire_local(directory, owns, program)
