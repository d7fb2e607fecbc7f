"""An ingest's stats.json, read once by one type: `Stats`.

stats.json (written by `transforms.beam.stats`, format_version 1) holds the
row count, one entry per sparse feature (`features`: ids per row,
capacities per batch size, top ids, raw values), per dense column (`dense`),
the label's (`label`), and what validation and the writers add
(`validation`, `dead_letters`, `joins`). `Stats` reads it from an output
directory or a file path, local or remote (`sparse_io.locations`), checks
it is a stats document, and answers the questions its readers ask.

Example:
  >>> import json, os, tempfile
  >>> d = tempfile.mkdtemp()
  >>> with open(os.path.join(d, "stats.json"), "w") as f:
  ...     json.dump({"format_version": 1, "num_rows": 3, "features": {},
  ...                "label": {"name": "click", "mean": 0.5}}, f)
  >>> stats = Stats.load(d)
  >>> stats.num_rows, stats.numeric("click")["mean"], Stats.load_if_present(os.path.join(d, "nothing"))
  (3, 0.5, None)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from sparse_io import locations
from sparse_io.output_files import STATS_FILE

__all__ = ["Stats", "StatsError", "STATS_FORMAT_VERSION", "stats_json"]

STATS_FORMAT_VERSION = 1


class StatsError(ValueError):
    """stats.json cannot be read or is not a stats document; the message names the file."""


def stats_json(stats: Mapping[str, Any]) -> str:
    """stats.json's text for `stats`: every writer of the file uses it, so its bytes follow from the dict alone."""
    return json.dumps(stats, indent=2, sort_keys=False) + "\n"


def _path_of(location: str) -> str:
    return location if location.endswith(".json") else locations.join(location, STATS_FILE)


@dataclasses.dataclass(frozen=True)
class Stats:
    """A stats.json document and where it was read.

    Attributes:
      data: the parsed document (a dict with `format_version` 1 and `features`).
      path: the file it was read from.
    """

    data: Mapping[str, Any]
    path: str = ""

    @classmethod
    def from_dict(cls, data: Any, path: str = STATS_FILE) -> Stats:
        """Checks `data` is a stats document.

        Raises:
          StatsError: not a mapping with a `features` mapping, or another format_version.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("features"), Mapping):
            raise StatsError(f"{path} is not a stats.json document (it has no features mapping)")
        if data.get("format_version", STATS_FORMAT_VERSION) != STATS_FORMAT_VERSION:
            raise StatsError(f"{path}: unsupported format_version {data.get('format_version')!r} "
                             f"(this version reads {STATS_FORMAT_VERSION})")
        return cls(data, path)

    @classmethod
    def load(cls, location: str) -> Stats:
        """The stats.json of an output directory (or the stats file `location` itself, when it ends in .json).

        Raises:
          FileNotFoundError: there is no such file (named).
          StatsError: it is not UTF-8 JSON, or not a stats document.
        """
        path = _path_of(location)
        if not locations.exists(path):
            raise FileNotFoundError(f"{path} does not exist (is {location} an ingest output?)")
        try:
            with locations.open_binary(path) as f:
                data = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StatsError(f"{path} cannot be read as JSON: {e}") from None
        return cls.from_dict(data, path)

    @classmethod
    def load_if_present(cls, location: str) -> Stats | None:
        """`load`, or None where the file does not exist."""
        try:
            return cls.load(location)
        except FileNotFoundError:
            return None

    @property
    def num_rows(self) -> int:
        """The rows the ingest wrote."""
        return int(self.data.get("num_rows") or 0)

    @property
    def features(self) -> Mapping[str, Any]:
        """Sparse feature name -> its entry."""
        return self.data["features"]

    def numeric(self, name: str) -> dict | None:
        """The entry of the label or dense column `name` (min, max, mean, value counts...), or None."""
        label = self.data.get("label")
        if isinstance(label, Mapping) and label.get("name") == name:
            return dict(label)
        entry = (self.data.get("dense") or {}).get(name)
        return dict(entry) if isinstance(entry, Mapping) else None
