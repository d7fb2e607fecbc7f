"""Command-line options of the ingest pipeline, as Beam `PipelineOptions`.

Our flags live in `IngestOptions`; every standard Beam option (runner,
Dataflow project/region/temp_location, setup_file, num_workers, ...) passes
through untouched. The flags themselves are
`pipelines.ingest_cli.add_ingest_flags`, shared with the command line,
which parses them without importing Beam. When no `--runner` is given the local in-process runner is
used (`transforms.beam.runner.in_process_options`).
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.ingest_cli import add_ingest_flags

__all__ = ["IngestOptions"]


class IngestOptions(PipelineOptions):
    """sparseflow's own ingest flags."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        add_ingest_flags(parser)
