"""tf.data input stage: shards and raw logs to COO, ragged or sparse training batches.

`make_dataset` reads the shards the Beam stage writes; `make_log_dataset`
reads raw Criteo/CSV logs graph-natively. The map functions (`to_coo`,
`pad_to_capacity`, `hash_ids`, `lookup_ids`, `truncate`) are plain graph code
for any tf.data pipeline.

How the package is laid out, following the data (one folder per source; no
source imports another):

  dataset, log_dataset, coo, ids, service: the public entry points
  core/ (options, columns, capacity, sharding, epochs, files, state, and the
    finish every source ends in: RawBatch -> COO (grouped, over csr_group) or
    ragged/sparse, padded to capacity, with label and position)
  columnar/source: Parquet or Arrow shards (reader, row_plan, unit_loader,
    csr_assembly / coo_assembly into batch_arrays, native_batch, column_check)
  tfrecord/source: TFRecord shards (parse_example)
  logs/source: raw logs (parsing, rebatch)
  service: `distribute` runs a dataset under the tf.data service, refusing
    Parquet, Arrow and counters (what make_dataset/make_log_dataset recorded)

Without TensorFlow (the `tf` extra) importing it raises
`sparse_io.extras.MissingExtraError` with the install command.
"""

from sparse_io.extras import require

require("tensorflow", "transforms.tfdata")

from transforms.tfdata.coo import Coo, pad_to_capacity, to_coo
from transforms.tfdata.core.capacity import capacity_from_stats, load_stats
from transforms.tfdata.core.columns import MISSING_INT
from transforms.tfdata.core.state import InputState
from transforms.tfdata.dataset import make_dataset
from transforms.tfdata.ids import hash_ids, lookup_ids, truncate, vocabulary_table
from transforms.tfdata.log_dataset import make_log_dataset
from transforms.tfdata.service import distribute

__all__ = [
    "Coo",
    "InputState",
    "MISSING_INT",
    "capacity_from_stats",
    "distribute",
    "hash_ids",
    "load_stats",
    "lookup_ids",
    "make_dataset",
    "make_log_dataset",
    "pad_to_capacity",
    "to_coo",
    "truncate",
    "vocabulary_table",
]
