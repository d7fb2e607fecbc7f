"""`python -m pipelines.ingest`: raw recommendation logs -> training shards.

Reads logs (criteo, csv, tsv, jsonl, parquet; local or gs://; `--delimiter`
for any one-character csv delimiter), optionally groups
user histories, hashes or looks up ids, and writes shards with schema.json,
stats.json, vocabularies, dead letters and a report::

    OUTPUT/
      part-00000-of-00004.parquet ...  shards (or .tfrecord)         [workers]
      schema.json                      what the shards hold          [workers]
      stats.json                       ids per row, COO capacities   [workers]
      vocab/<feature>.txt              vocabularies (when asked)     [workers]
      errors/dead_letters.jsonl        rejected records with reasons [workers]
      errors/context_dead_letters.jsonl  those of histories.context_from's logs (when given) [workers]
      report.html                      plots and the run summary     [launcher]
      _MANIFEST.json                   the commit record, written last [launcher]

While it runs, `_INGEST.lock` keeps a second ingest out of the same output.
Only a run that succeeds writes `_MANIFEST.json` (every file with its size and
CRC-32C, the config, the inputs and the row totals; `sparse_io.manifest`);
readers refuse a directory without one. A run that fails removes what it
wrote except `errors/dead_letters.jsonl`; a killed run's files are removed by
the next run on that output (`pipelines.output_dir`).

A log with fewer rows than `num_shards` commits as any other: only the
shards that got rows are kept, renumbered `part-i-of-K` (`run_shards`); an
empty log (no rows at all) is an output of one empty shard, not an error.

Local run (the in-process runner is the default)::

    python -m pipelines.ingest --input 'logs/*.tsv' --format criteo --output out/

Held-out data in the training data's id space (same vocabularies and hash
settings; see `pipelines.id_spaces`)::

    python -m pipelines.ingest --input 'day_2/*.tsv' --format criteo --output out/heldout --vocab_from out/train

Dataflow: add `--runner DataflowRunner --project P --region R
--temp_location gs://B/tmp --setup_file ./pyproject.toml` (or
`--sdk_container_image`), and gs:// paths for --input and --output;
`--validate_only` builds and serialises that graph without submitting it.

Exit status: 0 on success; 2 with one line naming the problem for bad flags,
an invalid config, an input pattern that matches nothing, an unwritable or
non-empty output (without --overwrite), an output another ingest is writing,
or an exceeded error budget; 1 for an internal error. `--help` lists the
flags (they are defined in `pipelines.ingest_cli`); every other
flag is Beam's.
"""

from __future__ import annotations

if __name__ == "__main__":
    # The program's flags and config are checked before this module's Beam imports: `--help`, a bad flag or a
    # bad config answer in a fraction of a second, not after seconds of importing Beam.
    from pipelines.ingest_cli import check_command_line

    check_command_line()

import dataclasses
import json
import logging
import os
import re
import sys
import time

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli
from pipelines.config import IngestConfig
from pipelines.credentials import check_cloud_credentials
from pipelines.errors import DataError, UsageError, cli_errors, quiet_beam_tracebacks
from pipelines.ingest_cli import ingest_config, ingest_parser, parse_ingest_args
from pipelines.ingest_joins import join_side_tables, size_join_tables
from pipelines.launch_paths import absolute_local, resolve_config_paths
from pipelines.output_dir import (
    check_inputs_outside,
    check_output_directory,
    is_temporary,
    list_output,
    manifest_files,
    prepare_output,
    recover_dead_letters,
    roll_back,
)
from pipelines.output_lock import acquire_output_lock
from pipelines.progress import LogProgress
from sparse_io.errors import CorruptFileError, LayoutError
from sparse_io.formats import SHARD_SUFFIX
from sparse_io.manifest import LOCK_FILE, MANIFEST_FILE, commit_directory
from sparse_io.output_files import (
    DEAD_LETTERS_FILE,
    ERRORS_DIR,
    REPORT_FILE,
    STATS_FILE,
    VOCAB_DIR,
    parse_shard_name,
    shard_name,
)
from sparse_io.schema import SCHEMA_FILE, Schema
from sparse_io.write_records import load_write_records, mark, take_record
from transforms.beam.histories import TARGET_PREFIX

__all__ = ["build_ingest", "ingest_parser", "run_ingest", "run_parsed", "main"]

_LOGGER = logging.getLogger("sparseflow.ingest")
CONTEXT_DEAD_LETTERS_FILE = "context_dead_letters.jsonl"  # of `histories.context_from`'s logs
CONTEXT_COLUMN = "__sparseflow_context"  # marks the events read for context only; never written


def build_ingest(pipeline, config: IngestConfig, input_pattern: str, output_dir: str, *,
                 progress_seconds: float = 0.0):
    """Adds the ingest to `pipeline`; returns the WriteShards result PCollection.

    The graph: ReadLogs (+ ReadContextLogs for `histories.context_from`, marked as context) -> [LogProgress]
    -> [CrossFeatures: crosses of the raw values, `pipelines.config_crosses`]
    -> [GroupHistories; a history ingest counts its vocabularies over the events before grouping]
    -> [AnalyzeDerived: bucket boundaries and scale parameters, one combine over the events] -> HashIds ->
    [ComputeVocabulary + ApplyVocabulary, or ApplyVocabulary of the
    `vocab_from` ingest's files; on a local runner, batches wait on disk for computed vocabularies and
    stored derived features' parameters: HoldBatches + ReleaseBatches] -> [ApplyDerived: the stored ones; those
    derived at read go to schema.json, `transforms.beam.at_read`] -> [CountOovIds] -> WriteShards
    (which also writes schema.json, with each feature's id space, and stats.json). Every element between read and
    write is a `pa.RecordBatch`.
    """
    import apache_beam as beam

    from transforms.beam import (
        ApplyVocabulary,
        ComputeVocabulary,
        GroupHistories,
        HashIds,
        ReadLogs,
        WriteShards,
    )
    from transforms.beam.held_batches import HoldBatches, ReleaseBatches
    from transforms.beam.raw_values import CountRawValues, HashIdsCountingRawValues
    from transforms.beam.runner import keeps_pcollections_in_memory

    read_options = dict(
        batch_size=config.read_batch_size,
        strict=config.strict,
        list_separator=config.list_separator,
        skip_header=config.skip_header,
        max_line_bytes=config.max_line_bytes,
        error_budget=config.error_budget,
        **config.read_options(),
    )
    batches = pipeline | "ReadLogs" >> ReadLogs(
        input_pattern, config.log_format, config.read_schema,
        dead_letters_path=FileSystems.join(output_dir, ERRORS_DIR, DEAD_LETTERS_FILE), **read_options,
    )
    if progress_seconds > 0:
        batches = batches | "Progress" >> LogProgress(progress_seconds)
    schema = config.schema
    h = config.histories
    late = []
    if config.joins and not (h is not None and h.context_from):
        batches, late = join_side_tables(batches, config.joins)
    overflow = []  # crosses come after the joins: a joined column can be crossed
    if config.crosses:  # new columns from the raw values, before hashing or lookup (pipelines.config_crosses)
        from pipelines.config_crosses import cross_feature_spec
        from pipelines.id_spaces import adopt_id_spaces
        from transforms.beam.crosses import CrossFeatures

        # With vocab_from, the crosses take the source ingest's buckets and cap.
        crosses = adopt_id_spaces(config, config.vocab_from, VOCAB_DIR)[0].crosses if config.vocab_from else \
            config.crosses
        batches, counted = batches | "CrossFeatures" >> CrossFeatures({c.name: c.spec for c in crosses})
        overflow.append(counted)
        schema = Schema([*schema, *(cross_feature_spec(c) for c in crosses)])
    events = batches  # what vocabularies are counted over: every event read, before any grouping
    if h is not None:
        context_column = None
        if h.context_from:
            context_column = CONTEXT_COLUMN
            context = pipeline | "ReadContextLogs" >> ReadLogs(
                h.context_from, config.log_format, config.read_schema,
                dead_letters_path=FileSystems.join(output_dir, ERRORS_DIR, CONTEXT_DEAD_LETTERS_FILE), **read_options,
            )
            events = (
                (batches | "MarkOwnEvents" >> beam.Map(_marked, False),
                 context | "MarkContextEvents" >> beam.Map(_marked, True))
                | "AllEvents" >> beam.Flatten()
            )
            if config.joins:
                events, late = join_side_tables(events, config.joins)
        batches = events | "GroupHistories" >> GroupHistories(
            h.key, h.item, h.time, h.weight,
            max_length=h.max_length, min_length=h.min_length,
            dedupe_consecutive=h.dedupe_consecutive, examples_per_event=h.examples_per_event,
            item_columns=h.item_columns, event_columns=h.event_columns(config.schema),
            context_column=context_column, batch_size=config.read_batch_size,
            num_partitions=h.num_partitions, memory_budget=h.memory_budget_mb << 20,
            # The events wait on disk, as temporaries of this output, not in the runner's memory.
            spill_dir=output_dir, hold_for_count=keeps_pcollections_in_memory(pipeline.options),
        )
        schema = None  # the grouped columns differ from the events'; WriteShards infers them
    from pipelines.id_spaces import CopyVocabularies, CountOovIds, adopt_id_spaces, hash_updates, vocabulary_updates

    vocab_dir = FileSystems.join(output_dir, VOCAB_DIR)
    reused = {}
    if config.vocab_from:
        config, reused = adopt_id_spaces(config, config.vocab_from, VOCAB_DIR)
    hashed = _hash_plans(config)
    # Raw values are counted before hashing or lookup turns them into ids (stats.json `raw_values`); those of
    # columns hashed without a salt from the fingerprints the hashing computes (HashIdsCountingRawValues).
    raw_features = sorted({p.name for p in config.features} | set(reused))
    by_hashing = {name for name, _, salt in hashed if salt is None} & set(raw_features)
    counted = [name for name in raw_features if name not in by_hashing]
    late += [batches | "CountRawValues" >> CountRawValues(counted)] if counted else []
    late += overflow
    derived = None
    stored_derived: tuple = ()
    if config.derived:  # bucketized and scaled columns: parameters from every event, applied below
        from pipelines.config_derived import with_derived_columns
        from transforms.beam.derived import AnalyzeDerived, derived_schema_updates

        # Those whose parameters come from the data are derived at read (transforms.beam.at_read): storing
        # them would make every batch wait on disk for the analysis.
        at_read = tuple(p.name for p in config.derived if p.needs_analysis) if config.output.derives_at_read \
            else ()
        stored_derived = tuple(p for p in config.derived if p.name not in at_read)
        derived, at_read_update = events | "AnalyzeDerived" >> AnalyzeDerived(
            config.derived, at_read, config.batch_sizes)
        late.append(derived | "DerivedFields" >> beam.FlatMap(
            derived_schema_updates, frozenset(p.name for p in stored_derived)))
        if at_read:
            late.append(at_read_update)
        schema = with_derived_columns(schema, stored_derived)
    salts = sorted({salt for _, _, salt in hashed}, key=lambda s: (s is not None, str(s)))
    for salt in salts:
        plans = [(name, buckets) for name, buckets, s in hashed if s == salt]
        hash_ids = HashIds([name for name, _ in plans], dict(plans), salt)
        raw_hashed = sorted(by_hashing & set(dict(plans))) if salt is None else []
        if raw_hashed:
            batches, raw_counts = batches | "HashIds" >> HashIdsCountingRawValues(hash_ids, raw_hashed)
            late.append(raw_counts)
        else:
            batches = batches | f"HashIds{'' if salt is None else salt}" >> hash_ids
        if schema is not None:
            schema = hash_ids.output_schema(schema)
            for name, buckets in plans:
                schema = schema.replace(name, **hash_updates(buckets, salt))
    # A history's target columns are looked up in their item's (or item column's) vocabulary: one id space.
    targets = _target_columns(config)
    # Vocabulary sizes and fingerprints are known once the vocabularies are written.
    if reused:
        aliases = {column: dataclasses.replace(reused[f], feature=column)
                   for column, f in targets.items() if f in reused}
        late.append(pipeline | "ReuseVocabularies" >> CopyVocabularies(reused, vocab_dir))
        if aliases:
            late.append(pipeline | "ReusedTargetIdSpaces" >> beam.Create(
                [vocabulary_updates(v) for v in aliases.values()]))
        every = {**reused, **aliases}
        batches = batches | "ApplyReusedVocabulary" >> ApplyVocabulary(
            {column: v.path for column, v in every.items()},
            num_oov_buckets={column: v.num_oov_buckets for column, v in every.items()},
            checksums={column: v.crc32c for column, v in every.items()},
        )
    groups: dict[tuple, list[str]] = {}
    for p in config.vocabularies:
        groups.setdefault((p.min_frequency, p.top_k, p.num_oov_buckets), []).append(p.name)
    # Every vocabulary is counted from the same batches (each group owns its features). A local
    # runner would hold the batches in memory until all are written: they wait on disk instead
    # (transforms.beam.held_batches); a distributed runner materializes them in its own shuffle.
    computed = []
    for i, ((min_frequency, top_k, num_oov), names) in enumerate(sorted(groups.items(), key=str)):
        shared = {p.name: p.shared_vocabulary for p in config.vocabularies if p.shared_vocabulary}
        computed.append(
            events | f"ComputeVocabulary{i}" >> ComputeVocabulary(names, vocab_dir, min_frequency, top_k, num_oov,
                                                                  shared=shared)
        )
    analysed = [derived] if any(p.needs_analysis for p in stored_derived) else []
    if (computed or analysed) and keeps_pcollections_in_memory(pipeline.options):
        held = batches | "HoldBatches" >> HoldBatches(output_dir)
        batches = held | "ReleaseBatches" >> ReleaseBatches(computed + analysed)
    if stored_derived:
        from transforms.beam.derived import ApplyDerived

        batches = batches | "ApplyDerived" >> ApplyDerived(derived, [p.name for p in stored_derived])
    for i, vocab in enumerate(computed):
        if targets:
            vocab = vocab | f"WithTargets{i}" >> beam.FlatMap(_with_target_aliases, targets)
        batches = batches | f"ApplyVocabulary{i}" >> ApplyVocabulary(vocab)
        late.append(vocab | f"VocabularySizes{i}" >> beam.Map(vocabulary_updates))
    looked_up = {p.name: p.num_oov_buckets for p in config.vocabularies}
    looked_up.update({v.feature: v.num_oov_buckets for v in reused.values()})
    if looked_up:
        # A target's OOV ids count towards its item's: schema.json's oov_ids covers histories and targets.
        counted_as = {column: f for column, f in targets.items() if f in looked_up}
        late.append(batches | "CountOovIds" >> CountOovIds(looked_up, counted_as))
        if schema is not None:
            for name in looked_up:
                schema = schema.replace(name, dtype="int64")
    out = config.output
    updates = {name: hash_updates(b, salt) for name, b, salt in hashed}
    order_by = None
    if config.histories is not None:
        h = config.histories
        for name in (h.time, *h.event_columns(config.schema)):
            unit = config.schema[name].time_unit if name in config.schema else None
            if unit is not None:
                updates.setdefault(name, {})["time_unit"] = unit
        for name, role in _history_roles(config).items():
            updates.setdefault(name, {})["history_role"] = role
        if not out.shuffle:
            # Unshuffled history rows read as a user expects: by key, then time (the per-event time is a scalar).
            order_by = (h.key, h.time) if h.examples_per_event else (h.key,)
    return batches | "WriteShards" >> WriteShards(
        output_dir,
        out.shard_format,
        out.num_shards,
        out.shuffle,
        out.seed,
        schema=schema,
        # An inferred schema cannot know the id ranges; the trainer sizes its tables from them.
        schema_updates=None if schema is not None else updates,
        stats_batch_sizes=list(config.batch_sizes),
        row_group_size=out.row_group_size,
        write_threads=out.write_threads,
        compression=out.compression,
        order_by=order_by,
        late_updates=(late | "IdSpaces" >> beam.Flatten()) if late else None,
    )


def _target_columns(config) -> dict[str, str]:
    """A history ingest's target columns of ids, each to the listed column whose id space it shares.

    `target_<item>` shares the item's, `target_<c>` item column c's (one per
    example, per `examples_per_event`).
    """
    h = config.histories
    if h is None or not h.examples_per_event:
        return {}
    return {TARGET_PREFIX + name: name for name in (h.item, *h.item_columns)}


def _history_roles(config) -> dict[str, str]:
    """Each output column of a history ingest -> its `history_role` in schema.json (`sparse_io.schema`)."""
    h = config.histories
    roles = {h.key: "key", h.time: "time", h.item: "item"}
    roles.update(dict.fromkeys(h.item_columns, "item_column"))
    roles.update(dict.fromkeys(h.event_columns(config.schema), "event"))
    if h.examples_per_event:
        roles.update(dict.fromkeys(
            (TARGET_PREFIX + name for name in (h.item, h.weight, *h.item_columns) if name), "target"))
    return roles


def _with_target_aliases(vocab, targets: dict[str, str]):
    """The VocabularyFile, and the same file once more for each target column looked up in it."""
    yield vocab
    for column, feature in sorted(targets.items()):
        if feature == vocab.feature:
            yield dataclasses.replace(vocab, feature=column)


def _marked(batch, context: bool):
    """`batch` with the boolean column that tells context events (history only) from this log's own."""
    return batch.append_column(CONTEXT_COLUMN, pa.array(np.full(batch.num_rows, context)))


def _hash_plans(config) -> list[tuple[str, int, object]]:
    """(column, hash_buckets, salt) for every hashed column.

    A history's target item (`target_<item>`, one per example) is hashed like
    the history's items, so the two share one id space; so is each item
    column's target.
    """
    plans = [(p.name, p.hash_buckets, p.salt) for p in config.hashed]
    targets = _target_columns(config)
    plans += [(column, buckets, salt) for column, feature in targets.items()
              for name, buckets, salt in plans if name == feature]
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
    ours, beam_argv = parse_ingest_args(argv)
    return run_parsed(ours, beam_argv, ingest_config(ours))


def run_parsed(ours, beam_argv: list[str], config: IngestConfig) -> dict:
    """Runs the ingest the checked flags (`pipelines.ingest_cli.parse_ingest_args`) and config ask for."""
    from transforms.beam.runner import in_process_options

    options = in_process_options(beam_argv)
    if ours.validate_only:
        return validate_graph(options, config, ours.input, ours.output)
    check_cloud_credentials({"--input": ours.input, "--output": ours.output})
    files = _check_input(ours.input)
    context_files = _check_context(config, files)
    config, table_files = size_join_tables(config)
    context_files = [*context_files, *table_files]  # inputs too: the manifest lists them
    if config.output.num_shards is None:
        config = dataclasses.replace(
            config, output=dataclasses.replace(config.output, num_shards=shards_for_input(files))
        )
    _check_interactive_beam()
    check_inputs_outside(ours.output, [m.path for m in files + context_files])
    check_output_directory(ours.output)
    report = not ours.no_report and FileSystems.get_scheme(ours.output) is None
    planned = planned_outputs(config, report=report)
    # The files of an output this run replaces are its to remove, and shards under names it may write when the
    # rows cannot fill num_shards (left, say, by a failed run of an earlier version).
    owns = sorted(set(planned) | set(manifest_files(ours.output)) | set(run_shards(list_output(ours.output), config)))
    with acquire_output_lock(ours.output, owns) as lock:
        dead_letters = f"{ERRORS_DIR}/{DEAD_LETTERS_FILE}"
        prepare_output(ours.output, overwrite=ours.overwrite, owns=owns, stale=lock.stale,
                       failure_notes=(dead_letters,))
        try:
            summary = _run_and_commit(options, config, ours, files, planned, report, context_files)
        except BaseException:
            # All or nothing: what this run wrote goes, except its dead letters, which say why it failed.
            recover_dead_letters(ours.output, dead_letters)
            roll_back(ours.output, owns + run_shards(list_output(ours.output), config), keep=(dead_letters,))
            raise
    return summary


def planned_outputs(config: IngestConfig, *, report: bool) -> list[str]:
    """Every file an ingest with `config` writes, relative to its output (the manifest aside)."""
    out = config.output
    names = [shard_name(i, out.num_shards, SHARD_SUFFIX[out.shard_format]) for i in range(out.num_shards)]
    names += [SCHEMA_FILE, STATS_FILE, f"{ERRORS_DIR}/{DEAD_LETTERS_FILE}"]
    if config.histories is not None and config.histories.context_from:
        names.append(f"{ERRORS_DIR}/{CONTEXT_DEAD_LETTERS_FILE}")
    vocabularies = [p.shared_vocabulary or p.name for p in config.vocabularies]  # shared: one file, several features
    if config.vocab_from:  # the reused vocabularies are copied into this output
        from pipelines.id_spaces import adopt_id_spaces

        vocabularies += [v.file_name for v in adopt_id_spaces(config, config.vocab_from, VOCAB_DIR)[1].values()]
    names += [f"{VOCAB_DIR}/{name}.txt" for name in sorted(set(vocabularies))]
    if report:
        names.append(REPORT_FILE)
    return names


def run_shards(present, config: IngestConfig) -> list[str]:
    """The shards among `present` (paths relative to the output) that an ingest with `config` writes.

    `part-i-of-K` in the config's shard format for any K up to `num_shards`:
    when the rows cannot fill `num_shards`, WriteShards keeps only the shards
    that got rows, renumbered (one empty shard for no rows at all).
    """
    suffix = SHARD_SUFFIX[config.output.shard_format]
    found = []
    for relative in present:
        parsed = parse_shard_name(relative)
        if parsed is not None and parsed[2] == suffix and parsed[1] <= config.output.num_shards:
            found.append(relative)
    return sorted(found)


def _committable(present: set[str], planned: list[str], config: IngestConfig) -> list[str]:
    """The files of a finished run to commit: its planned files and one complete set of shards.

    Raises:
      RuntimeError: a file the run does not write, or shards that are not
        `part-0-of-K` ... `part-(K-1)-of-K` of one K (a bug, not the data's fault).
    """
    shards = run_shards(present, config)
    unexpected = sorted(f for f in present - set(planned) - set(shards) if not is_temporary(f))
    if unexpected:
        raise RuntimeError(f"the ingest wrote {unexpected[0]!r}, which is not among the files it plans to write")
    counts = {parse_shard_name(name)[1] for name in shards}  # type: ignore[index]
    suffix = SHARD_SUFFIX[config.output.shard_format]
    if len(counts) != 1 or shards != [shard_name(i, max(counts), suffix) for i in range(max(counts))]:
        raise RuntimeError(f"the ingest wrote the shards {shards[:4]}..., not one complete set part-i-of-K")
    return sorted((present & set(planned)) | set(shards))


def _run_and_commit(options, config: IngestConfig, ours, files: list, planned: list[str], report: bool,
                    context_files: list = ()) -> dict:
    import apache_beam as beam

    started = time.monotonic()
    began = mark()  # this process's writes from here on are this run's
    _LOGGER.info("ingesting %s (%d file%s) into %s ...", ours.input, len(files), "" if len(files) == 1 else "s",
                 ours.output)
    pipeline = beam.Pipeline(options=options)
    # Workers resolve relative paths against their own working directory: the graph gets absolute ones.
    build_ingest(pipeline, resolve_config_paths(config), absolute_local(ours.input), absolute_local(ours.output),
                 progress_seconds=ours.progress_seconds)
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:  # Beam wraps worker errors; surface the budget and damaged-file ones plainly.
        if "ErrorBudgetExceeded" in f"{type(e).__name__} {e}":
            raise UsageError(_budget_line(e)) from e
        damaged = _data_file_line(e)
        if damaged is not None:
            raise DataError(damaged) from e
        raise
    seconds = time.monotonic() - started
    summary = {
        "input": ours.input,
        "format": config.log_format,
        "output": ours.output,
        "rows_in": _counter(result, "sparseflow.ReadLogs", "records"),
        "bad_records": _counter(result, "sparseflow.ReadLogs", "bad_records"),
        "rows_out": _counter(result, "sparseflow.WriteShards", "rows"),
        "num_shards": len(_shards(ours.output)),
        "shard_format": config.output.shard_format,
        "errors_dir": FileSystems.join(ours.output, ERRORS_DIR),
        "seconds": seconds,
    }
    from pipelines.validate import record_validation

    # Anomalies, and drift against the ingest whose id spaces this one reuses (its training data).
    found = record_validation(ours.output, config.vocab_from, config.validation, summary["rows_in"])["anomalies"]
    if found:
        _LOGGER.warning("%d anomal%s in the statistics (stats.json validation; python -m pipelines.validate)",
                        len(found), "y" if len(found) == 1 else "ies")
    if report:
        from pipelines.report import write_report

        _LOGGER.info("writing %s ...", FileSystems.join(ours.output, REPORT_FILE))
        summary["report"] = write_report(ours.output, summary)
    present = set(list_output(ours.output)) - {LOCK_FILE}
    committed = _committable(present, planned, config)
    # What the writers recorded while writing (shards, schema.json, stats.json, and the files this process
    # wrote since the run began: report.html, a rewritten stats.json): the commit reads none of those back.
    records = load_write_records(ours.output) or {}
    for name in committed:
        mine = take_record(FileSystems.join(ours.output, name), since=began)
        if mine is not None:
            records[name] = {**records.get(name, {}), "crc32c": mine[0], "bytes": mine[1]}
    roll_back(ours.output, [])  # temporaries only (the records' file too)
    # Written last: until this rename the directory is not an output.
    commit_directory(
        ours.output,
        committed,
        config=config_record(config),
        # histories.context_from's logs are inputs too: the histories were built from them.
        inputs=sorted(({"path": m.path, "bytes": m.size_in_bytes} for m in [*files, *context_files]),
                      key=lambda e: e["path"]),
        totals={"rows_in": summary["rows_in"], "bad": summary["bad_records"]},
        records=records,
    )
    summary["manifest"] = FileSystems.join(ours.output, MANIFEST_FILE)
    return summary


def config_record(config: IngestConfig):
    """`config` as JSON-able data (the schema as schema.json holds it), for the manifest."""
    def plain(value):
        if isinstance(value, Schema):
            return json.loads(value.to_json())
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(config)


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
    build_ingest(pipeline, resolve_config_paths(config), absolute_local(input_pattern), absolute_local(output_dir),
                 progress_seconds=0)
    proto = pipeline.to_runner_api()
    beam.Pipeline.from_runner_api(proto, pipeline.runner, options)
    return {
        "validated": True,
        "runner": options.view_as(StandardOptions).runner,
        "input": input_pattern,
        "output": output_dir,
        "transforms": len(proto.components.transforms),
    }


def _data_file_line(e: Exception) -> str | None:
    """The line "<file>: <what is wrong>" of a CorruptFileError or LayoutError raised in a worker, or None.

    Beam wraps a worker's error; both the cause chain and the wrapped message are searched.
    """
    seen = e
    while seen is not None:
        if isinstance(seen, (CorruptFileError, LayoutError)):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"(?:CorruptFileError|LayoutError): (.+?)(?: \[while running [^\]\n]*\])?$", str(e),
                      flags=re.M)
    return found.group(1) if found else None


def _budget_line(e: Exception) -> str:
    """The budget error's own line ("N of M records were bad (x%), over the error budget of y; first: ...")."""
    text = str(e)
    found = re.search(r"\d+ of \d+ records were bad", text)
    start = found.start() if found else max(text.find("error budget"), 0)
    return text[start:].strip().splitlines()[0]


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


def _check_context(config: IngestConfig, inputs: list) -> list:
    """The files `histories.context_from` matches (none without it).

    Raises:
      ConfigError: it matches no file, or a file `--input` matches too (its
        events would be in the histories twice).
    """
    from pipelines.config import ConfigError

    h = config.histories
    if h is None or not h.context_from:
        return []
    try:
        matched = _check_input(h.context_from)
    except UsageError as e:
        raise ConfigError(f"config key 'histories.context_from': {str(e).replace('--input ', '', 1)}") from None
    both = sorted({m.path for m in matched} & {m.path for m in inputs})
    if both:
        raise ConfigError(f"config key 'histories.context_from': {both[0]!r} is also an --input file; the context "
                          "logs are the earlier ones, apart from this ingest's own")
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


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.ingest` with `argv` (default: the command line); errors exit as the module doc says.

    Run as the program (`argv` None), a successful run ends with
    `cli.skip_collection_at_exit()`: the process exits ~0.4 s sooner.
    """
    program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    with cli_errors("pipelines.ingest"):
        ours, beam_argv = parse_ingest_args(argv)
        cli.configure_logging(ours.verbose)
        config = ingest_config(ours)
        quiet_beam_tracebacks()
        from pipelines.report import summary_text

        summary = run_parsed(ours, beam_argv, config)
        if summary.get("validated"):
            print(f"pipeline valid for {summary['runner']}: {summary['transforms']} steps, every one serialises; "
                  "nothing was read or written")
        else:
            print(summary_text(summary))
    if program:
        cli.skip_collection_at_exit()


if __name__ == "__main__":
    main()
