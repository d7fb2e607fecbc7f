"""Pipeline options that keep local runs in-process and offline.

Beam 2.77's default DirectRunner first tries to download the Prism runner
binary from the web and only falls back to the in-process Python runner after
that fails. Our pipelines, tests and documented commands therefore name the
in-process `FnApiRunner` explicitly unless the caller asks for another runner.
"""

from __future__ import annotations

from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

__all__ = ["IN_PROCESS_RUNNER", "in_process_options", "keeps_pcollections_in_memory"]

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


# Runners that run a pipeline in this process (or a local one of their own) and keep every
# PCollection that crosses a stage boundary in memory.
_IN_MEMORY_RUNNERS = {
    "FnApiRunner", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner", "PrismRunner",
    "InteractiveRunner",
}


def keeps_pcollections_in_memory(options: PipelineOptions) -> bool:
    """Whether `options`' runner holds whole PCollections in memory between stages (the local runners).

    Distributed runners (Dataflow, Flink, Spark, a portable job service)
    spill what they materialize to their own shuffle or disk.

    Example:
      >>> keeps_pcollections_in_memory(in_process_options())
      True
      >>> keeps_pcollections_in_memory(PipelineOptions(["--runner=DataflowRunner"]))
      False
    """
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return True
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1] in _IN_MEMORY_RUNNERS
