"""A Beam `TestPipeline` on the DirectRunner that never reaches for the Prism runner.

Beam 2.77's DirectRunner (`SwitchingDirectRunner`) first offers every
pipeline to the Prism runner, whose binary it downloads from the web; only
when that fails does it fall back to its in-process runners. Offline the
attempt costs seconds and logs noise. The DirectRunner leaves Prism out
when it was told it runs interactively (`DirectRunner.is_interactive()`,
the switch Beam's InteractiveRunner sets); that flag is read nowhere else,
so flipping it changes nothing but the Prism attempt.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import DirectRunner
from apache_beam.testing.test_pipeline import TestPipeline

__all__ = ["direct_runner", "test_pipeline"]


def direct_runner() -> DirectRunner:
    """A DirectRunner that goes straight to its in-process runners (no Prism attempt, no download).

    It still picks between the FnApiRunner (batch pipelines) and the
    BundleBasedDirectRunner (TestStream, streaming) as the DirectRunner does.
    """
    runner = DirectRunner()
    # The DirectRunner's only use of this flag is to skip Prism (Beam's InteractiveRunner sets it
    # for the same reason). Pipeline options such as --allow_unsafe_triggers or
    # --update_compatibility_version skip Prism too, but change what the pipeline does.
    runner.is_interactive()
    return runner


def test_pipeline(**options) -> TestPipeline:
    """A `TestPipeline` on the DirectRunner that runs offline, with no Prism download attempt.

    How: the pipeline gets a DirectRunner instance on which
    `is_interactive()` was called (see `direct_runner`). That sets the
    runner's `_is_interactive` flag, which Beam 2.77's `SwitchingDirectRunner`
    reads in one place only: to leave the Prism runner out. So nothing is
    downloaded, no fallback delay is paid, and the pipeline runs on the
    DirectRunner's in-process FnApiRunner (or its BundleBasedDirectRunner
    for what the FnApiRunner cannot run), exactly as when Prism is missing.
    No pipeline option is set for this.

    Args:
      options: pipeline options by name, as `PipelineOptions(**options)`
        takes them (e.g. `direct_num_workers=2`,
        `direct_running_mode="multi_threading"`).

    Returns: a `TestPipeline`; used as a context manager it runs on exit and
    fails the test when the pipeline (or an `assert_that`) fails.

    Raises:
      ValueError: `runner` among the options (this pipeline is the DirectRunner's).

    Example:
      >>> import apache_beam as beam
      >>> from apache_beam.testing.util import assert_that, equal_to
      >>> with test_pipeline() as p:
      ...     _ = assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: 3 * x), equal_to([3, 6]))
    """
    if "runner" in options:
        raise ValueError(f"test_pipeline: runs on the DirectRunner; got runner={options['runner']!r}")
    return TestPipeline(runner=direct_runner(), options=PipelineOptions([], **options))


# pytest collects module-level functions named test_*; a test module importing this function must
# not run it as a test.
test_pipeline.__test__ = False
