"""`python -m pipelines.validate DIR [--baseline TRAIN_DIR] [--config FILE] [--report FILE]`: anomalies in an ingest.

Reads DIR/stats.json (and TRAIN_DIR/stats.json) and prints one line per
anomaly, tab-separated: feature, kind, value, threshold, and what it means.
Without --baseline only the anomalies of one ingest are looked for (a feature
always missing, a constant feature, a label rate of 0 or 1, a kind of dead
letter above its share of the rows read); with it, drift and skew against the
baseline too. The kinds and their default thresholds are
in `pipelines.anomalies`; a config file's `validation:` key sets others (the
ingest's own config file may carry it).

With --report FILE it also writes a report.html of DIR to FILE that flags
these anomalies and, with --baseline, draws the baseline's top values and
histograms beside DIR's (FILE must lie outside DIR, whose files are
committed by its manifest).

Exit status: 0 when there is no anomaly, 3 when there are, 2 for bad usage (a
directory without a readable stats.json, a bad config), 1 for a bug.

Example::

    $ python -m pipelines.validate out/day2 --baseline out/day1
    C3	categorical_drift	0.4125	0.1	L-infinity distance of raw-value shares
    pipelines.validate: 1 anomaly in out/day2 (baseline out/day1)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from sparse_io.output_files import DEAD_LETTERS_FILE, ERRORS_DIR, SCHEMA_FILE, STATS_FILE
from sparse_io.stats_file import Stats, StatsError, stats_json

__all__ = ["main", "validate", "load_stats", "load_thresholds", "record_validation", "dead_letters_of",
           "write_comparison_report", "ANOMALIES_EXIT"]

ANOMALIES_EXIT = 3


def _parser() -> argparse.ArgumentParser:
    from pipelines import cli

    p = cli.parser("pipelines.validate", __doc__, "DIR [--baseline TRAIN_DIR] [--config FILE] [--report FILE]")
    p.add_argument("directory", metavar="DIR", help="an ingest output directory (its stats.json is read)")
    p.add_argument("--baseline", metavar="TRAIN_DIR", default=None,
                   help="the ingest to compare with (e.g. the training data's)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="a YAML or JSON file whose validation: key sets thresholds (see pipelines.anomalies)")
    p.add_argument("--report", metavar="FILE", default=None,
                   help="also write an HTML report of DIR, compared with TRAIN_DIR, to FILE (outside DIR)")
    return p


def load_stats(directory: str) -> dict:
    """`directory/stats.json` as a dict.

    Raises:
      UsageError: no such file, or not a stats.json document (named).
    """
    from pipelines.errors import UsageError

    if not os.path.isfile(os.path.join(directory, STATS_FILE)):
        raise UsageError(f"{directory} has no stats.json (is it an ingest output directory?)")
    try:
        return dict(Stats.load(directory).data)
    except (OSError, StatsError) as e:
        raise UsageError(str(e)) from None


def load_thresholds(path: str | None):
    """The `Thresholds` of the `validation:` key of the YAML/JSON file at `path` (None: the defaults).

    Raises:
      ConfigError: an unreadable file, bad syntax, no `validation:` key, or a bad threshold (named).
    """
    import yaml

    from pipelines.anomalies import ThresholdError, Thresholds, thresholds_from
    from pipelines.config import ConfigError

    if path is None:
        return Thresholds()
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f) if path.endswith(".json") else yaml.safe_load(f)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"config file {path!r} cannot be parsed: {e}") from None
    if not isinstance(data, dict) or "validation" not in data:
        raise ConfigError(f"config file {path!r} has no validation: key")
    try:
        return thresholds_from(data["validation"])
    except ThresholdError as e:
        raise ConfigError(f"config file {path!r}: {e}") from None


def time_columns(directory: str) -> set[str]:
    """The columns schema.json gives a `time_unit` (none when it has no readable schema.json)."""
    try:
        with open(os.path.join(directory, SCHEMA_FILE), encoding="utf-8") as f:
            features = json.load(f).get("features", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {f["name"] for f in features if isinstance(f, dict) and f.get("time_unit") and "name" in f}


def validate(directory: str, baseline: str | None = None, config: str | None = None) -> list:
    """The `Anomaly` list of `directory`'s ingest (against `baseline`'s when given).

    A stats.json written before dead letters were counted into it gets them from `directory/errors/`.
    """
    from pipelines.anomalies import find_anomalies

    thresholds = load_thresholds(config)
    stats = load_stats(directory)
    if "dead_letters" not in stats:
        stats["dead_letters"] = dead_letters_of(directory, stats)
    return find_anomalies(stats, load_stats(baseline) if baseline else None, thresholds,
                          time_columns=time_columns(directory))


def dead_letters_of(output_dir: str, stats: dict, rows_read: int | None = None) -> dict:
    """The `pipelines.dead_letter_counts` entry of `output_dir/errors/dead_letters.jsonl`.

    `rows_read` (the ingest's records, good and bad) defaults to _MANIFEST.json's `totals.rows_in`, else
    stats.json's `num_rows` plus the dead letters (the rows read by an ingest without histories).
    """
    from apache_beam.io.filesystems import FileSystems

    from pipelines.dead_letter_counts import count_dead_letters
    from sparse_io.manifest import MANIFEST_FILE

    path = FileSystems.join(output_dir, ERRORS_DIR, DEAD_LETTERS_FILE)
    if rows_read is None:
        manifest = FileSystems.join(output_dir, MANIFEST_FILE)
        try:
            rows_read = int(_read_json(manifest)["totals"]["rows_in"]) if FileSystems.exists(manifest) else None
        except (ValueError, KeyError, TypeError):
            rows_read = None
    if rows_read is None:  # the letters are counted first: they complete the rows read
        rows_read = int(stats.get("num_rows", 0)) + count_dead_letters(path, 0)["bad"]
    return count_dead_letters(path, rows_read)


def write_comparison_report(directory: str, baseline: str | None, anomalies: list, path: str) -> str:
    """Writes report.html of `directory` to `path`, flagging `anomalies` and drawn beside `baseline`'s figures.

    Raises:
      UsageError: `path` lies inside `directory` (its files are committed by its manifest).
    """
    import dataclasses

    from pipelines.errors import UsageError
    from pipelines.report import write_report
    from sparse_io.manifest import MANIFEST_FILE

    inside = os.path.commonpath([os.path.abspath(directory), os.path.abspath(path)]) == os.path.abspath(directory)
    if inside:
        raise UsageError(f"--report {path}: write the report outside {directory} (its files are committed)")
    stats = load_stats(directory)
    stats["validation"] = {"baseline": baseline, "anomalies": [dataclasses.asdict(a) for a in anomalies]}
    try:
        with open(os.path.join(directory, MANIFEST_FILE), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        manifest = {}
    totals = manifest.get("totals") or {}
    inputs = [i.get("path", "") for i in manifest.get("inputs", []) if isinstance(i, dict)]
    summary = {"input": ", ".join(inputs[:3]) + (" ..." if len(inputs) > 3 else ""), "output": directory,
               "rows_in": totals.get("rows_in") or 0, "rows_out": totals.get("rows_out", stats.get("num_rows", 0)),
               "bad_records": totals.get("bad") or 0, "num_shards": len(manifest.get("shards", [])) or "-"}
    return write_report(directory, summary, stats=stats, path=path)


def _read_json(path: str) -> dict:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        return json.loads(f.read().decode("utf-8"))


def record_validation(output_dir: str, baseline_dir: str | None, thresholds=None, rows_read: int | None = None) -> dict:
    """Adds `validation` to `output_dir`'s stats.json: its anomalies, against `baseline_dir`'s when given.

    Also adds `dead_letters`, the dead letters counted by reason (`pipelines.dead_letter_counts`) out of
    `rows_read` (see `dead_letters_of`), which the `dead_letters` anomalies are found from.

    The entry is `{"baseline": baseline_dir or None, "anomalies": [{"feature", "kind", "value",
    "threshold", "detail"}, ...]}`, what report.html flags at its top. Works on any Beam filesystem
    (the ingest's output, a `--vocab_from` source on gs://). Returns the entry.
    """
    import dataclasses

    from apache_beam.io.filesystems import FileSystems

    from pipelines.anomalies import find_anomalies
    from sparse_io.atomic import atomic_write_text

    path = FileSystems.join(output_dir, STATS_FILE)
    stats = dict(Stats.load(output_dir).data)
    baseline = dict(Stats.load(baseline_dir).data) if baseline_dir else None
    schema_path = FileSystems.join(output_dir, SCHEMA_FILE)
    schema = _read_json(schema_path) if FileSystems.exists(schema_path) else {}
    times = {f["name"] for f in schema.get("features", []) if isinstance(f, dict) and f.get("time_unit")}
    stats["dead_letters"] = dead_letters_of(output_dir, stats, rows_read)
    found = find_anomalies(stats, baseline, thresholds, time_columns=times)
    entry = {"baseline": baseline_dir, "anomalies": [dataclasses.asdict(a) for a in found]}
    stats["validation"] = entry
    atomic_write_text(path, stats_json(stats), output_root=output_dir)
    return entry


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.validate` with `argv` (default: the command line); exits as the module doc says."""
    from pipelines import cli

    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    cli.configure_logging(args.verbose)
    with cli.cli_errors("pipelines.validate"):
        anomalies = validate(args.directory, args.baseline, args.config)
        if args.report:
            written = write_comparison_report(args.directory, args.baseline, anomalies, args.report)
            print(f"pipelines.validate: wrote {written}", file=sys.stderr)
    against = f" (baseline {args.baseline})" if args.baseline else ""
    for anomaly in anomalies:
        print(anomaly.line())
    if anomalies:
        count = f"{len(anomalies)} anomal{'y' if len(anomalies) == 1 else 'ies'}"
        print(f"pipelines.validate: {count} in {args.directory}{against}", file=sys.stderr)
        sys.exit(ANOMALIES_EXIT)
    print(f"{args.directory}: no anomalies{against}")


if __name__ == "__main__":
    main()
