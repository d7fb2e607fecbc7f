"""tf.data input stage: shards and raw logs to COO, ragged or sparse training batches.

`make_dataset` reads the shards the Beam stage writes; `make_log_dataset`
reads raw Criteo/CSV logs graph-natively. The map functions (`to_coo`,
`pad_to_capacity`, `hash_ids`, `lookup_ids`, `truncate`) are plain graph code
for any tf.data pipeline.

How the modules fit, following the data:

  options (BatchOptions, OutputOptions: the arguments, checked once)
  sources, each ending in a `finish.RawBatch`:
    columnar_dataset -> columnar_source (Parquet or Arrow shards: shard_files,
      row_plan, unit_loader, csr_assembly / coo_assembly into batch_arrays,
      handed over as batch_layout; arrow_check)
    tfrecord_source
    log_source (log_parsing, rebatch)
  finish: RawBatch -> COO (grouped, over csr_group) or ragged/sparse, padded to
    capacity (capacity), with label and position
  service: `distribute` runs a dataset under the tf.data service, refusing
    Parquet, Arrow and counters (what make_dataset/make_log_dataset recorded)
"""

from transforms.tfdata.capacity import capacity_from_stats, load_stats
from transforms.tfdata.columns import MISSING_INT
from transforms.tfdata.coo import Coo, pad_to_capacity, to_coo
from transforms.tfdata.dataset import make_dataset
from transforms.tfdata.ids import hash_ids, lookup_ids, truncate, vocabulary_table
from transforms.tfdata.log_dataset import make_log_dataset
from transforms.tfdata.service import distribute
from transforms.tfdata.state import InputState

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
