"""Pipeline options that keep local runs in-process and offline.

Beam 2.77's default DirectRunner first tries to download the Prism runner
binary from the web and only falls back to the in-process Python runner after
that fails. Our pipelines, tests and documented commands therefore name the
in-process `FnApiRunner` explicitly unless the caller asks for another runner.
"""

from __future__ import annotations

from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

__all__ = ["IN_PROCESS_RUNNER", "in_process_options"]

IN_PROCESS_RUNNER = "FnApiRunner"


def in_process_options(argv: Sequence[str] | None = None, **overrides) -> PipelineOptions:
    """PipelineOptions from `argv` and keyword overrides, runner defaulting to `FnApiRunner`.

    Args:
      argv: command-line style flags (e.g. `["--direct_num_workers=2"]`); a
        `--runner` flag here or `runner=` in `overrides` wins.
      overrides: option values by name, as `PipelineOptions(**kwargs)` takes them.

    Example:
      >>> in_process_options().view_as(StandardOptions).runner
      'FnApiRunner'
      >>> in_process_options(["--runner=DataflowRunner"]).view_as(StandardOptions).runner
      'DataflowRunner'
    """
    options = PipelineOptions(list(argv or []), **overrides)
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = IN_PROCESS_RUNNER
    return options
