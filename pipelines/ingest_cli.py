"""The ingest's command line, apart from its Beam graph: flags and config are checked before Beam is imported.

`python -m pipelines.ingest --help`, a missing or malformed flag of ours and a
bad config all answer from here, in a fraction of a second: nothing in this
module imports Beam or TensorFlow. Only a flag this program does not define
needs Beam, whose own list of pipeline options decides whether it passes
through (`pipelines.cli.beam_parser`). `pipelines.ingest` runs
`check_command_line` before its own imports.

Example:
  >>> ours, beam_argv = parse_ingest_args(["--input", "logs/*.tsv", "--output", "out"])
  >>> (ours.input, ours.output, ours.overwrite, beam_argv)
  ('logs/*.tsv', 'out', False, [])
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from pipelines import cli
from pipelines.errors import UsageError, cli_errors
from sparse_io.formats import LOG_FORMATS

__all__ = ["add_ingest_flags", "check_command_line", "ingest_config", "ingest_parser", "parse_ingest_args"]

DESCRIPTION = "`python -m pipelines.ingest`: raw recommendation logs -> training shards."


def add_ingest_flags(parser) -> None:
    """Adds the ingest's own flags to `parser` (an argparse parser; Beam's `PipelineOptions` parser too).

    A flag added here appears in `python -m pipelines.ingest --help` with its
    default (`pipelines.cli`): give it a one-line `help=`.
    """
    parser.add_argument("--input", default=None, metavar="PATTERN", help="file pattern of the logs (local path or gs://)")
    parser.add_argument(
        "--format",
        default=None,
        choices=LOG_FORMATS,
        help="log format (overrides the config's input.format)",
    )
    parser.add_argument(
        "--delimiter",
        default=None,
        metavar="CHAR",
        help="csv field delimiter, one character ('\\t' for a tab; overrides the config's input.delimiter)",
    )
    parser.add_argument("--config", default=None, metavar="FILE", help="YAML or JSON ingest config")
    parser.add_argument("--output", default=None, metavar="DIR", help="output directory (local path or gs://)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        default=False,
        help="replace the ingest output already in --output: only the files its _MANIFEST.json lists "
        "(otherwise a non-empty output is an error; files no ingest wrote are always refused)",
    )
    parser.add_argument(
        "--progress_seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between progress log lines on the local runner (0 turns them off)",
    )
    parser.add_argument(
        "--vocab_from",
        default=None,
        metavar="DIR",
        help="an earlier ingest's output directory whose vocabularies and hash settings this ingest reuses, "
        "so equal raw values get equal ids (overrides the config's vocab_from)",
    )
    parser.add_argument("--no_report", action="store_true", default=False, help="skip report.html")
    parser.add_argument(
        "--config_reference",
        action="store_true",
        default=False,
        help="print every config key (YAML path, type, default, allowed values, meaning, example) as Markdown "
        "and exit (docs/config.md is this output)",
    )
    parser.add_argument(
        "--validate_only",
        action="store_true",
        default=False,
        help="build the pipeline for the chosen runner, check that every step serialises, and stop "
        "(reads and writes nothing; a pre-flight check before submitting to Dataflow)",
    )

def ingest_parser() -> argparse.ArgumentParser:
    """The ingest's own flags with the shared help, `-v` and `--help_beam`.

    `parse_known_args` leaves Beam's flags for Beam.
    """
    p = cli.parser("pipelines.ingest", DESCRIPTION,
                   "--input PATTERN --output DIR [--format F] [--config FILE] [options]", beam=True)
    add_ingest_flags(p)
    return p


def parse_ingest_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags from `argv`, checked, and the rest: Beam's flags exactly as given.

    Raises:
      SystemExit: status 2 after the usage line and one error line, for a flag
        neither we nor Beam define, a bad value of one, or a missing --input or --output.
    """
    parser = ingest_parser()
    ours, beam_argv = parser.parse_known_args(argv)
    if ours.config_reference:
        from pipelines.config_keys import reference_markdown

        sys.stdout.write(reference_markdown())
        raise SystemExit(0)
    if beam_argv:  # Beam's parser (and so Beam) only when there is something for it to judge
        _reject_unknown_flags(beam_argv, parser)
    if not ours.input:
        parser.error("--input is required (a file pattern, local or gs://)")
    if not ours.output:
        parser.error("--output is required (a directory)")
    if not ours.progress_seconds >= 0:  # also rejects NaN
        parser.error(f"--progress_seconds must be >= 0 (0 turns progress lines off), got {ours.progress_seconds}")
    return ours, beam_argv


def ingest_config(ours: argparse.Namespace):
    """The `IngestConfig` the parsed flags ask for: --config's (with the flags' overrides), or the Criteo default.

    Raises:
      UsageError: --delimiter or a non-Criteo --format without --config.
      ConfigError: an invalid config file.
    """
    from pipelines.config import default_criteo_config, load_config

    if ours.config:
        config = load_config(ours.config, format_override=ours.format, delimiter_override=ours.delimiter)
    elif ours.delimiter is not None:
        raise UsageError("--delimiter needs --config naming the columns of the delimited log")
    elif ours.format in (None, "criteo"):
        config = default_criteo_config()
    else:
        raise UsageError(f"--format {ours.format} needs --config naming the features to read")
    if ours.vocab_from:
        config = dataclasses.replace(config, vocab_from=ours.vocab_from)
    return config


def _reject_unknown_flags(beam_argv: list[str], parser) -> None:
    """Exits 2 via `parser` for what Beam does not know either, or a bad value of one of Beam's flags."""
    try:
        _, unknown = cli.beam_parser().parse_known_args(beam_argv)
    except cli.BeamFlagError as e:
        parser.error(str(e))
    if unknown:
        known = list(parser._option_string_actions) + list(cli.beam_parser()._option_string_actions)
        flags = [token for token in unknown if token.startswith("-")] or unknown  # not the values they took
        parser.error(cli.unrecognized_flags_message(flags, known))


def check_command_line(argv: list[str] | None = None) -> None:
    """Exits as `python -m pipelines.ingest` would for `--help`, a bad flag or a bad config; returns otherwise.

    `pipelines.ingest` calls it first when run as the program, before its own (Beam) imports.
    """
    argv = sys.argv[1:] if argv is None else argv
    with cli_errors("pipelines.ingest"):
        ingest_config(parse_ingest_args(argv)[0])
