"""tf.Transform as the benchmarks' peer: one AnalyzeAndTransformDataset run over a Criteo TSV log.

The log's columns are `label`, I1..I13 (integers) and the given categorical
columns; `preprocessing_fn` (tf.Transform's, over those inputs: the label a
dense int64, every other column a SparseTensor) says what is analysed and
applied. The transformed rows go to 4 TFRecord shards as tf.Examples and the
transform function beside them, on the same in-process Beam runner our
ingest uses. Only the pipeline is timed: counting the rows written, after it,
is not.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from collections.abc import Callable, Sequence

INTS = [f"I{i}" for i in range(1, 14)]

__all__ = ["INTS", "run_tft"]


def run_tft(log: str, out: str, cats: Sequence[str], preprocessing_fn: Callable) -> dict:
    """Runs the pipeline into `out` (emptied first); returns {"rows", "seconds", "cpu_s"}."""
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx_bsl.public import tfxio

    from transforms.beam.runner import in_process_options

    tf.get_logger().setLevel("ERROR")
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    spec.update({name: tf.io.VarLenFeature(tf.int64) for name in INTS})
    spec.update({name: tf.io.VarLenFeature(tf.string) for name in cats})
    shutil.rmtree(out, ignore_errors=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    source = tfxio.CsvTFXIO(
        file_pattern=log, column_names=["label", *INTS, *cats], delimiter="\t",
        schema=schema_utils.schema_from_feature_spec(spec), telemetry_descriptors=["benchmark"],
    )
    with beam.Pipeline(options=in_process_options()) as pipeline:
        with tft_beam.Context(temp_dir=os.path.join(out, "tmp")):
            raw = pipeline | "Read" >> source.BeamSource()
            (data, metadata), transform_fn = (raw, source.TensorAdapterConfig()) | tft_beam.AnalyzeAndTransformDataset(
                preprocessing_fn
            )
            coder = tft.coders.ExampleProtoCoder(metadata.schema)
            rows = data | "Encode" >> beam.Map(coder.encode)
            _ = rows | "Write" >> beam.io.WriteToTFRecord(os.path.join(out, "part"), num_shards=4)
            _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(out)
    seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    files = sorted(glob.glob(os.path.join(out, "part-*")))
    written = sum(1 for _ in tf.data.TFRecordDataset(files).as_numpy_iterator())
    return {"rows": written, "seconds": seconds, "cpu_s": cpu}
