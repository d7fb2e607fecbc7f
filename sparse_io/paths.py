"""Names that become file names under an output directory, and the one join that keeps them there.

A feature name from a config ends up in a path (`vocab/<feature>.txt`), so a
name such as "../../x" or "/abs/x" would otherwise write outside the output.
Two guards, used together:

* `check_feature_name`: the documented character set for feature names,
  checked when a config loads: ASCII letters, digits, "_", "." and "-"
  (`FEATURE_NAME_CHARACTERS`), not starting with ".", at most
  `MAX_FEATURE_NAME_LENGTH` characters.
* `join_under`: every writer that puts a name under a root joins it with
  this function, which accepts only a single file name and refuses anything
  that could leave the root: a separator, "." or "..", an absolute path, a
  leading "." (temporaries and hidden files are ours), a NUL. It works the
  same on local paths and URLs (gs://...), where no file system would stop
  a ".." key. Links under a local root are checked by the writers
  (`sparse_io.atomic`, `output_root=`).
"""

from __future__ import annotations

import os
import re

from sparse_io.locations import is_remote

__all__ = ["FEATURE_NAME_CHARACTERS", "MAX_FEATURE_NAME_LENGTH", "check_feature_name", "join_under"]

FEATURE_NAME_CHARACTERS = "A-Z, a-z, 0-9, '_', '.', '-'"
# A file name holds 255 bytes; a vocabulary file adds ".txt" and its temporary a ".tmp-<12 hex>-" prefix.
MAX_FEATURE_NAME_LENGTH = 200
_FEATURE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_feature_name(name: object) -> None:
    """Raises ValueError unless `name` is a feature name of the documented characters.

    Example:
      >>> check_feature_name("user_id.v2")
      >>> check_feature_name("../../x")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ValueError: feature name '../../x' is not allowed: use only A-Z, a-z, 0-9, '_', '.', '-', ...
    """
    ok = (
        isinstance(name, str)
        and _FEATURE_NAME.fullmatch(name) is not None
        and not name.startswith(".")
        and len(name) <= MAX_FEATURE_NAME_LENGTH
    )
    if not ok:
        raise ValueError(
            f"feature name {name!r} is not allowed: use only {FEATURE_NAME_CHARACTERS}, not starting with '.'"
            + (f", at most {MAX_FEATURE_NAME_LENGTH} characters" if len(str(name)) > MAX_FEATURE_NAME_LENGTH else "")
            + " (feature names become file names such as vocab/<name>.txt)"
        )


def join_under(root: str, name: str) -> str:
    """`root` joined with the single file name `name`, which cannot lead out of `root`.

    Args:
      root: a local directory or a URL (gs://bucket/dir).
      name: one file name, for example "C1.txt".

    Raises:
      ValueError: `name` holds a separator, is "." or "..", is absolute,
        empty, starts with ".", or holds a NUL; the message names it.

    Example:
      >>> join_under("gs://b/out/vocab", "C1.txt")
      'gs://b/out/vocab/C1.txt'
      >>> join_under("out/vocab", "../../x.txt")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ValueError: refusing file name '../../x.txt' under 'out/vocab': it must be one plain name ...
    """
    bad = (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or any(c in name for c in ("/", "\\", "\0"))
        or os.path.isabs(name)
    )
    if bad:
        raise ValueError(
            f"refusing file name {name!r} under {root!r}: it must be one plain name (no '/', '\\\\', NUL, "
            "leading '.'), or it could lead out of the directory"
        )
    if is_remote(root):
        return root.rstrip("/") + "/" + name
    return os.path.join(root, name)
