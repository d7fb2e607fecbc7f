"""Turning failures of a command-line program into one clear line and an exit status."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator

from sparse_io.extras import missing_extra

__all__ = ["DataError", "UsageError", "cli_errors", "quiet_beam_tracebacks"]

_LOGGER = logging.getLogger("sparseflow")


class UsageError(Exception):
    """A problem with what the user asked for: printed as one line, exit status 2."""


class DataError(UsageError):
    """Input data the program cannot use (empty, too small, another id space): one line, exit status 2."""


class _NoBeamTracebacks(logging.Filter):
    """Keeps Beam's own log lines but drops the worker tracebacks it logs before re-raising.

    The program prints the failure as one line itself; SPARSEFLOW_DEBUG=1
    keeps the tracebacks.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("apache_beam") and record.levelno >= logging.ERROR:
            return False
        return True


def quiet_beam_tracebacks() -> None:
    """Installs `_NoBeamTracebacks` on the root handlers (unless SPARSEFLOW_DEBUG is set)."""
    if os.environ.get("SPARSEFLOW_DEBUG"):
        return
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NoBeamTracebacks())


# A data error raised inside a tf.py_function (the Parquet and Arrow reader) reaches the program as a
# TensorFlow error whose message carries the original's "Name: message" line.
_CARRIED = re.compile(r"\b(?:CorruptFileError|ChangedFileError|ManifestError): ([^\n]+)")


def _carried_data_error(error: BaseException) -> str | None:
    """The one-line message of a damaged-file or manifest error carried by a TensorFlow error, or None."""
    tf = sys.modules.get("tensorflow")  # None where an import of it failed: then no TensorFlow error exists
    if tf is None or not isinstance(error, tf.errors.OpError):
        return None
    found = _CARRIED.search(error.message)
    if not found:
        return None
    # tf.debugging.Assert (the TFRecord reader's pin check) prints its message escaped, in brackets, ending
    # in the "\n" that marks where the line ends.
    return found.group(1).strip().removesuffix("\\n]").strip()


@contextlib.contextmanager
def cli_errors(program: str) -> Iterator[None]:
    """Prints `program: error: ...` and exits non-zero instead of a bare traceback.

    UsageError (DataError too), ConfigError, SchemaError, a damaged input
    file (CorruptFileError), a header that does not fit the schema
    (LayoutError), a column of the wrong type (ColumnTypeError), an
    output that is incomplete or differs from its manifest (ManifestError), a package
    that one of the extras installs (TensorFlow, Beam's Google Cloud I/O: the line is the pip command) and
    the OSErrors of a missing or unwritable path exit 2, as does a TensorFlow
    error carrying one of the first (a shard found damaged or replaced while
    training reads it: its own line is printed); anything else exits 1 with its
    one-line message; set SPARSEFLOW_DEBUG=1 to get the full traceback
    instead. (A bad flag never gets here: the parser prints the usage line
    and its error and exits 2 itself.)
    """
    from pipelines.config import ConfigError
    from sparse_io.errors import CorruptFileError, LayoutError
    from sparse_io.manifest import ManifestError
    from sparse_io.readers._convert import ColumnTypeError
    from sparse_io.schema import SchemaError

    try:
        yield
    except (UsageError, ConfigError, SchemaError, CorruptFileError, LayoutError, ColumnTypeError, ManifestError,
            FileNotFoundError, PermissionError, NotADirectoryError, FileExistsError) as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:
        carried = _carried_data_error(e)
        if carried is not None:
            print(f"{program}: error: {carried}", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("SPARSEFLOW_DEBUG"):
            raise
        hint = missing_extra(e)
        if hint is not None:  # TensorFlow or another extra's package is not installed: a usage problem
            print(f"{program}: error: {hint}", file=sys.stderr)
            sys.exit(2)
        _LOGGER.debug("%s failed", program, exc_info=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{program}: error: {type(e).__name__}: {first} (SPARSEFLOW_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        sys.exit(1)
