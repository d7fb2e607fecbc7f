"""The errors for a file that cannot be read: damaged bytes, or a layout that does not fit what is read.

Readers turn the bare errors of pyarrow or TensorFlow into `CorruptFileError`,
so the message always names the file, and a caller can tell a damaged file
(skip it, fetch it again) from a bad argument or a schema mismatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["CorruptFileError", "LayoutError", "damage_is_corruption"]


class CorruptFileError(ValueError):
    """A file cannot be read because its bytes are damaged.

    Attributes:
      path: the file.
      reason: what is wrong, in a line.

    Example:
      >>> str(CorruptFileError("out/part-00000-of-00002.parquet", "truncated"))
      'out/part-00000-of-00002.parquet: truncated'
    """

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self):  # keeps the error picklable (Beam ships errors between processes)
        return type(self), (self.path, self.reason)


class LayoutError(ValueError):
    """A file's columns do not fit what the schema reads: a header lacking a column, repeating one, too short.

    Attributes:
      path: the file.
      reason: what is wrong, in a line (naming the column).

    Example:
      >>> str(LayoutError("logs/a.csv", "the header lacks column(s) ['price']"))
      "logs/a.csv: the header lacks column(s) ['price']"
    """

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self):  # picklable, as Beam ships errors between processes
        return type(self), (self.path, self.reason)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def damage_is_corruption(path: str, what: str) -> Iterator[None]:
    """Turns pyarrow's errors about a file's bytes, raised inside the block, into `CorruptFileError`.

    pyarrow's own errors and a name in the file's metadata that no longer
    decodes as UTF-8 are the bytes'. Errors that are not about the bytes pass through: a missing file, a
    permission problem (any OSError carrying an errno), everything else.
    """
    import pyarrow as pa

    try:
        yield
    except OSError as e:
        if e.errno is not None:
            raise
        raise CorruptFileError(path, f"damaged {what} file: {first_line(e)}") from e
    except (pa.ArrowException, UnicodeDecodeError) as e:  # a name in the metadata that is no UTF-8 any more
        raise CorruptFileError(path, f"damaged {what} file: {first_line(e)}") from e
