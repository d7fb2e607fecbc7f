"""Arrow shards to COO batches (batch 4096): the native Arrow op against the Python reader and TFRecord.

    python -m benchmarks.arrow_op_input [--quick] [--json out.json]

The data sets of `benchmarks.tfdata_input` (criteo: 26 one-id features, 13
nullable dense floats; multi: 8 weighted features of ~10 ids a row), written
as Arrow and TFRecord shards. Contenders, each taken inside a `tf.function`
loop (as a compiled training step takes its batches):

  arrow op        make_dataset over the Arrow shards (the native dataset op);
  arrow op raw    the op's own dataset inside it, without the prefetch and
                  options after it: the op's share;
  arrow python    the same, read by the Python reader (`python_arrow_reader`);
  parse_example   TFRecordDataset -> batch -> tf.io.parse_example (the peer);
  memcpy batch bytes  a numpy copy of as many bytes as one pass of COO
                  batches holds: the limit of a reader that only moves them.

Four measures, contenders alternating in rotating order, medians:

  steady   one pass over the data through a pipeline already run for one
           untimed pass (start-up excluded);
  start-up from `make_dataset` to the first batch of a fresh iterator
           (shards opened, checked and planned; for the op, the first
           record batch's checksum);
  new iterator  from `iter()` to the first batch, over a dataset made and
           read from once before: what each later epoch's `for batch in
           ds` pays (for the op, what was verified is the dataset's);
  epochs   five epochs through one fresh iterator, start-up included.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np

from benchmarks._timing import markdown_table
from benchmarks.tfdata_input import (
    BATCH,
    _alternate,
    _delivered_bytes,
    _graph_consumer,
    criteo_like,
    multi_valued,
    standard_dataset,
    write_shards,
)

EPOCHS = 5


def _pipelines(arrow: str, tfrecord: str, schema, num_epochs):
    from transforms import make_dataset
    from transforms.tfdata.columnar.arrow_op import python_arrow_reader

    def op():
        ds = make_dataset(arrow, BATCH, shuffle=False, num_epochs=num_epochs)
        assert ds._sparseflow_parquet_source.reader == "op", ds._sparseflow_parquet_source.reader
        return ds

    def python():
        with python_arrow_reader():
            return make_dataset(arrow, BATCH, shuffle=False, num_epochs=num_epochs)

    def peer():
        ds = standard_dataset(tfrecord, schema)  # endless: repeat()
        return ds if num_epochs is None else ds.take(num_epochs * _batches_per_epoch(arrow))

    def raw():
        return _op_source(op())

    return {"arrow op": op, "arrow op raw": raw, "arrow python": python, "parse_example": peer}


def _op_source(dataset):
    """The native op's dataset that `dataset` (a make_dataset over Arrow shards) is built on."""
    from transforms.tfdata.columnar.arrow_op import _ArrowOpDataset
    from transforms.tfdata.service import _lineage

    found = [d for d in _lineage(dataset) if isinstance(d, _ArrowOpDataset)]
    assert len(found) == 1, found
    return found[0]


def _batches_per_epoch(arrow: str) -> int:
    import pyarrow.ipc as ipc

    rows = 0
    for name in os.listdir(arrow):
        if name.endswith(".arrow"):
            with ipc.open_file(os.path.join(arrow, name)) as reader:
                rows += sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    return -(-rows // BATCH)


def _timed(pipelines: dict, reps: int, measure) -> dict:
    """`measure(make)` seconds per contender, `reps` rounds in rotating order: (median, min, max)."""
    names = list(pipelines)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(measure(pipelines[name]))
            gc.collect()
    return {name: (float(np.median(v)), min(v), max(v)) for name, v in seconds.items()}


def bench_set(name: str, make_table, rows: int, reps: int, tmp: str) -> list[dict]:
    schema, table, _ = make_table(rows)
    directory = os.path.join(tmp, name)
    os.makedirs(directory)
    _, tfrecord, arrow = write_shards(directory, schema, table)
    batches = _batches_per_epoch(arrow)
    consume = _graph_consumer()
    results = []

    # Steady state: tfdata_input's protocol (one untimed pass on each fresh pipeline, then one timed).
    steady = {k: ("pipeline", make, consume) for k, make in _pipelines(arrow, tfrecord, schema, None).items()}
    from transforms import make_dataset

    delivered = _delivered_bytes(make_dataset(arrow, BATCH, shuffle=False, num_epochs=1))
    source, target = np.ones(delivered, np.uint8), np.empty(delivered, np.uint8)
    steady["memcpy batch bytes"] = ("call", lambda: np.copyto(target, source))
    for contender, t in _alternate(steady, reps=reps, batches=batches).items():
        results.append(dict(set=name, measure="steady pass", contender=contender, median_s=t.median_s, min_s=t.min_s,
                            max_s=t.max_s, rows_per_s=rows / t.median_s))

    def first_batch(make):
        began = time.perf_counter()
        next(iter(make()))
        return time.perf_counter() - began

    def five_epochs(make):
        began = time.perf_counter()
        consume(iter(make()), EPOCHS * batches)
        return time.perf_counter() - began

    def new_iterator(ds):
        began = time.perf_counter()
        next(iter(ds))
        return time.perf_counter() - began

    made = {k: make() for k, make in _pipelines(arrow, tfrecord, schema, 1).items()}
    for ds in made.values():
        next(iter(ds))
    measures = (("start-up (first batch)", first_batch, _pipelines(arrow, tfrecord, schema, None), None),
                ("new iterator (first batch)", new_iterator, made, None),
                (f"{EPOCHS} epochs, one iterator", five_epochs, _pipelines(arrow, tfrecord, schema, EPOCHS), EPOCHS))
    for measure, fn, pipelines, epochs in measures:
        for contender, (median, low, high) in _timed(pipelines, reps, fn).items():
            per = rows * EPOCHS / median if epochs else None
            results.append(dict(set=name, measure=measure, contender=contender, median_s=median, min_s=low,
                                max_s=high, rows_per_s=per))
    return results


def ratios(results: list[dict]) -> list[str]:
    """One line per set and measure: the op against the Python reader and the peer (and the copy, steady)."""
    by = {(r["set"], r["measure"], r["contender"]): r["median_s"] for r in results}
    lines = []
    for s, measure in sorted({(r["set"], r["measure"]) for r in results}):
        op = by[(s, measure, "arrow op")]
        line = (f"{s}, {measure}: arrow op {by[(s, measure, 'parse_example')] / op:.2f}x parse_example, "
                f"{by[(s, measure, 'arrow python')] / op:.2f}x the Python reader")
        if (s, measure, "memcpy batch bytes") in by:
            copy = by[(s, measure, "memcpy batch bytes")]
            line += (f", {copy / op:.3f}x a copy of the batch bytes (the op's own dataset "
                     f"{copy / by[(s, measure, 'arrow op raw')]:.3f}x)")
        lines.append(line)
    return lines


def run(quick: bool) -> dict:
    rows = {"criteo": 16_384 if quick else 204_800, "multi": 8_192 if quick else 102_400}
    reps = 1 if quick else 3
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("criteo", criteo_like), ("multi", multi_valued)):
            results += bench_set(name, make, rows[name], reps, tmp)
    print(markdown_table(results, ["set", "measure", "contender", "median_s", "min_s", "max_s", "rows_per_s"]))
    print()
    summary = ratios(results)
    print("\n".join(summary))
    return {"benchmark": "arrow_op_input", "quick": quick, "batch_size": BATCH, "rows": rows, "results": results,
            "summary": summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, well under a minute")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    out = run(args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
