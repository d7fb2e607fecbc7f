"""Command-line options of the ingest pipeline, as Beam `PipelineOptions`.

Our flags live in `IngestOptions`; every standard Beam option (runner,
Dataflow project/region/temp_location, setup_file, num_workers, ...) passes
through untouched. A flag added to `_add_argparse_args` appears in
`python -m pipelines.ingest --help` with its default (`pipelines.cli`): give
it a one-line `help=`. When no `--runner` is given the local in-process runner is
used (`transforms.beam.runner.in_process_options`).
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from sparse_io.formats import LOG_FORMATS

__all__ = ["IngestOptions"]


class IngestOptions(PipelineOptions):
    """sparseflow's own ingest flags."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
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
            "--validate_only",
            action="store_true",
            default=False,
            help="build the pipeline for the chosen runner, check that every step serialises, and stop "
            "(reads and writes nothing; a pre-flight check before submitting to Dataflow)",
        )
