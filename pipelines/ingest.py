"""`python -m pipelines.ingest`: raw recommendation logs -> training shards.

Reads logs (criteo, jsonl, csv, parquet; local or gs://), optionally groups
user histories, hashes or looks up ids, and writes shards with schema.json,
stats.json, vocabularies, dead letters and a report::

    OUTPUT/
      part-00000-of-00004.parquet ...  shards (or .tfrecord)         [workers]
      schema.json                      what the shards hold          [workers]
      stats.json                       ids per row, COO capacities   [workers]
      vocab/<feature>.txt              vocabularies (when asked)     [workers]
      errors/dead_letters.jsonl        rejected records with reasons [workers]
      report.html                      plots and the run summary     [launcher]

Local run (the in-process runner is the default)::

    python -m pipelines.ingest --input 'logs/*.tsv' --format criteo --output out/

Dataflow: add `--runner DataflowRunner --project P --region R
--temp_location gs://B/tmp --setup_file ./pyproject.toml` (or
`--sdk_container_image`), and gs:// paths for --input and --output;
`--validate_only` builds and serialises that graph without submitting it.

Exit status: 0 on success; 2 with one line naming the problem for bad flags,
an invalid config, an input pattern that matches nothing, an unwritable or
non-empty output (without --overwrite), or an exceeded error budget; 1 for an
internal error. `--help` lists the flags (they are defined in
`pipelines.options.IngestOptions`); every other flag is Beam's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli
from pipelines.config import IngestConfig, default_criteo_config, load_config
from pipelines.credentials import check_cloud_credentials
from pipelines.errors import UsageError, cli_errors, quiet_beam_tracebacks
from pipelines.options import IngestOptions
from pipelines.output_dir import prepare_output
from pipelines.progress import LogProgress
from transforms.beam.histories import TARGET_PREFIX

__all__ = ["build_ingest", "ingest_parser", "run_ingest", "main"]

_LOGGER = logging.getLogger("sparseflow.ingest")
ERRORS_DIR = "errors"
VOCAB_DIR = "vocab"
DEAD_LETTERS_FILE = "dead_letters.jsonl"


def build_ingest(pipeline, config: IngestConfig, input_pattern: str, output_dir: str, *,
                 progress_seconds: float = 0.0):
    """Adds the ingest to `pipeline`; returns the WriteShards result PCollection.

    The graph: ReadLogs -> [LogProgress] -> [GroupHistories] -> HashIds ->
    [ComputeVocabulary + ApplyVocabulary] -> WriteShards (which also writes
    schema.json and stats.json). Every element between read and write is a
    `pa.RecordBatch`.
    """
    from transforms.beam import (
        ApplyVocabulary,
        ComputeVocabulary,
        GroupHistories,
        HashIds,
        ReadLogs,
        WriteShards,
    )

    batches = pipeline | "ReadLogs" >> ReadLogs(
        input_pattern,
        config.format,
        config.schema,
        batch_size=config.read_batch_size,
        strict=config.strict,
        list_separator=config.list_separator,
        skip_header=config.skip_header,
        dead_letters_path=FileSystems.join(output_dir, ERRORS_DIR, DEAD_LETTERS_FILE),
        error_budget=config.error_budget,
    )
    if progress_seconds > 0:
        batches = batches | "Progress" >> LogProgress(progress_seconds)
    schema = config.schema
    if config.histories is not None:
        h = config.histories
        batches = batches | "GroupHistories" >> GroupHistories(
            h.key, h.item, h.time, h.weight,
            max_length=h.max_length, min_length=h.min_length,
            dedupe_consecutive=h.dedupe_consecutive, examples_per_event=h.examples_per_event,
            batch_size=config.read_batch_size,
        )
        schema = None  # the grouped columns differ from the events'; WriteShards infers them
    hashed = _hash_plans(config)
    salts = sorted({salt for _, _, salt in hashed}, key=lambda s: (s is not None, s))
    for salt in salts:
        plans = [(name, buckets) for name, buckets, s in hashed if s == salt]
        hash_ids = HashIds([name for name, _ in plans], dict(plans), salt)
        batches = batches | f"HashIds{'' if salt is None else salt}" >> hash_ids
        if schema is not None:
            schema = hash_ids.output_schema(schema)
    groups: dict[tuple, list[str]] = {}
    for p in config.vocabularies:
        groups.setdefault((p.min_frequency, p.top_k, p.num_oov_buckets), []).append(p.name)
    for i, ((min_frequency, top_k, num_oov), names) in enumerate(sorted(groups.items(), key=str)):
        vocab = batches | f"ComputeVocabulary{i}" >> ComputeVocabulary(
            names, FileSystems.join(output_dir, VOCAB_DIR), min_frequency, top_k, num_oov
        )
        batches = batches | f"ApplyVocabulary{i}" >> ApplyVocabulary(vocab)
        if schema is not None:
            for name in names:
                schema = schema.replace(name, dtype="int64")
    out = config.output
    return batches | "WriteShards" >> WriteShards(
        output_dir,
        out.format,
        out.num_shards,
        out.shuffle,
        out.seed,
        schema=schema,
        # An inferred schema cannot know the id ranges; the trainer sizes its tables from them.
        schema_updates=None if schema is not None else {name: {"hash_buckets": b} for name, b, _ in hashed},
        stats_batch_sizes=list(config.batch_sizes),
        row_group_size=out.row_group_size,
        write_threads=out.write_threads,
        compression=out.compression,
    )


def _hash_plans(config) -> list[tuple[str, int, object]]:
    """(column, hash_buckets, salt) for every hashed column.

    A history's target item (`target_<item>`, one per example) is hashed like
    the history's items, so the two share one id space.
    """
    plans = [(p.name, p.hash_buckets, p.salt) for p in config.hashed]
    h = config.histories
    if h is not None and h.examples_per_event:
        plans += [(TARGET_PREFIX + name, buckets, salt) for name, buckets, salt in plans if name == h.item]
    return plans


def _counter(result, namespace: str, name: str) -> int:
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(namespace).with_name(name))
    except (NotImplementedError, AttributeError):
        return 0
    return int(sum(c.committed or c.attempted or 0 for c in found["counters"]))


def run_ingest(argv: list[str]) -> dict:
    """Parses `argv`, runs the ingest and returns the run summary.

    Raises:
      SystemExit: a bad or missing flag (the usage line and one error line, exit status 2).
      UsageError, ConfigError: for what the user asked (see the module doc).
    """
    from transforms.beam.runner import in_process_options

    parser = ingest_parser()
    ours, beam_argv = parser.parse_known_args(argv)
    # Beam sees only its own flags, exactly as given; a bad one is refused with our usage line.
    _reject_unknown_flags(beam_argv, parser)
    options = in_process_options(beam_argv)
    if not ours.input:
        parser.error("--input is required (a file pattern, local or gs://)")
    if not ours.output:
        parser.error("--output is required (a directory)")
    if not ours.progress_seconds >= 0:  # also rejects NaN
        parser.error(f"--progress_seconds must be >= 0 (0 turns progress lines off), got {ours.progress_seconds}")
    if ours.config:
        config = load_config(ours.config, format_override=ours.format)
    elif ours.format in (None, "criteo"):
        config = default_criteo_config()
    else:
        raise UsageError(f"--format {ours.format} needs --config naming the features to read")
    if ours.validate_only:
        return validate_graph(options, config, ours.input, ours.output)
    check_cloud_credentials({"--input": ours.input, "--output": ours.output})
    files = _check_input(ours.input)
    if config.output.num_shards is None:
        config = dataclasses.replace(
            config, output=dataclasses.replace(config.output, num_shards=shards_for_input(files))
        )
    _check_interactive_beam()
    prepare_output(ours.output, overwrite=ours.overwrite)

    import apache_beam as beam

    started = time.monotonic()
    _LOGGER.info("ingesting %s (%d file%s) into %s ...", ours.input, len(files), "" if len(files) == 1 else "s",
                 ours.output)
    pipeline = beam.Pipeline(options=options)
    build_ingest(pipeline, config, ours.input, ours.output, progress_seconds=ours.progress_seconds)
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:  # Beam wraps worker errors; surface the budget one plainly.
        if "ErrorBudgetExceeded" in f"{type(e).__name__} {e}":
            raise UsageError(_budget_line(e)) from e
        raise
    seconds = time.monotonic() - started
    summary = {
        "input": ours.input,
        "format": config.format,
        "output": ours.output,
        "rows_in": _counter(result, "sparseflow.ReadLogs", "records"),
        "bad_records": _counter(result, "sparseflow.ReadLogs", "bad_records"),
        "rows_out": _counter(result, "sparseflow.WriteShards", "rows"),
        "num_shards": len(_shards(ours.output)),
        "shard_format": config.output.format,
        "errors_dir": FileSystems.join(ours.output, ERRORS_DIR),
        "seconds": seconds,
    }
    if not ours.no_report and FileSystems.get_scheme(ours.output) is None:
        from pipelines.report import write_report

        _LOGGER.info("writing %s ...", FileSystems.join(ours.output, "report.html"))
        summary["report"] = write_report(ours.output, summary)
    return summary


def validate_graph(options: PipelineOptions, config: IngestConfig, input_pattern: str, output_dir: str) -> dict:
    """Builds the ingest for `options`' runner and round-trips it through its runner API proto.

    Touches no file and no cloud service: it proves the graph is well formed
    and that every step (DoFns, coders, side inputs) pickles and unpickles,
    which is what a Dataflow submission needs. Returns a summary dict.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions, TestOptions

    # Beam's Dataflow checks of the gs:// buckets need the network; a dry run skips them.
    options.view_as(TestOptions).dry_run = True
    pipeline = beam.Pipeline(options=options)
    build_ingest(pipeline, config, input_pattern, output_dir, progress_seconds=0)
    proto = pipeline.to_runner_api()
    beam.Pipeline.from_runner_api(proto, pipeline.runner, options)
    return {
        "validated": True,
        "runner": options.view_as(StandardOptions).runner,
        "input": input_pattern,
        "output": output_dir,
        "transforms": len(proto.components.transforms),
    }


def _budget_line(e: Exception) -> str:
    text = str(e)
    start = text.find("error budget")
    line = text[start:] if start >= 0 else text
    return line.strip().splitlines()[0]


def _shards(output_dir: str) -> list[str]:
    pattern = FileSystems.join(output_dir, "part-*")
    return [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]


def _check_input(pattern: str) -> list:
    """The files `pattern` matches (Beam FileMetadata); UsageError when none or unlistable."""
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:  # the filesystem's own error says why (bad bucket, no credentials)
        raise UsageError(f"--input {pattern!r} could not be listed: {e}") from e
    if not matched and FileSystems.get_scheme(pattern) is None and os.path.isdir(pattern):
        matched = FileSystems.match([os.path.join(pattern, "*")])[0].metadata_list
    if not matched:
        raise UsageError(f"--input {pattern!r} matches no files")
    return matched


# One shard per this much log text; compressed logs count for _COMPRESSED_RATIO times their size.
INPUT_BYTES_PER_SHARD = 128 << 20
_COMPRESSED_RATIO = 4
_COMPRESSED = (".gz", ".bz2", ".zst", ".zstd", ".deflate")


def shards_for_input(files: list) -> int:
    """The shard count for logs of these sizes: one per `INPUT_BYTES_PER_SHARD` of text, at least one.

    Fixing the count before the run lets WriteShards stream: counting rows
    inside the pipeline would hold every row until the count is known.
    """
    text = sum(f.size_in_bytes * (_COMPRESSED_RATIO if f.path.endswith(_COMPRESSED) else 1) for f in files)
    return max(1, -(-text // INPUT_BYTES_PER_SHARD))


def _check_interactive_beam() -> None:
    # Inside IPython (a notebook kernel) Beam relabels every top-level transform through
    # Interactive Beam, whose import needs pandas, an extra we do not require; without this
    # check the run dies deep in Beam with "No module named 'pandas'".
    from apache_beam.utils.interactive_utils import is_in_ipython

    if not is_in_ipython():
        return
    try:
        import apache_beam.runners.interactive.interactive_environment  # noqa: F401
    except ImportError as e:
        raise UsageError(
            f"Beam cannot build a pipeline inside IPython/Jupyter here: Interactive Beam failed to import ({e}); "
            'pip install "apache-beam[interactive]", or run `python -m pipelines.ingest` in a subprocess'
        ) from e


def ingest_parser():
    """The ingest's own flags (`IngestOptions`) with the shared help, `-v` and `--help_beam`.

    A flag added to `IngestOptions._add_argparse_args` appears here, with its
    default, by itself. `parse_known_args` leaves Beam's flags for Beam.
    """
    p = cli.parser("pipelines.ingest", __doc__, "--input PATTERN --output DIR [--format F] [--config FILE] [options]",
                   beam=True)
    IngestOptions._add_argparse_args(p)
    return p


def _reject_unknown_flags(beam_argv: list[str], parser) -> None:
    """Exits 2 via `parser` for what Beam does not know either, or a bad value of one of Beam's flags."""
    try:
        _, unknown = cli.beam_parser().parse_known_args(beam_argv)
    except cli.BeamFlagError as e:
        parser.error(str(e))
    if unknown:
        parser.error(f"unrecognised argument(s): {' '.join(unknown)}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    with cli_errors("pipelines.ingest"):
        args, _ = ingest_parser().parse_known_args(argv)
        cli.configure_logging(args.verbose)
        quiet_beam_tracebacks()
        from pipelines.report import summary_text

        summary = run_ingest(argv)
        if summary.get("validated"):
            print(f"pipeline valid for {summary['runner']}: {summary['transforms']} steps, every one serialises; "
                  "nothing was read or written")
        else:
            print(summary_text(summary))


if __name__ == "__main__":
    main()
