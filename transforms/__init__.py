"""transforms: the Beam and tf.data steps of the flow.

Nothing heavy is imported here: each public name loads the module that
defines it on first use, so a Beam worker never imports TensorFlow and a
trainer never imports Beam.

Example:
  >>> import transforms
  >>> transforms.make_dataset.__module__
  'transforms.tfdata.dataset'
"""

from __future__ import annotations

import importlib

# public name -> module that defines it
_LAZY = {
    # Beam stage (imports Beam, never TensorFlow)
    "ReadLogs": "transforms.beam.read_logs",
    "HashIds": "transforms.beam.hash_ids",
    "hash_ids_arrow": "sparse_io.hashing",
    "ComputeVocabulary": "transforms.beam.vocabulary",
    "ApplyVocabulary": "transforms.beam.lookup",
    "GroupHistories": "transforms.beam.histories",
    "ComputeStats": "transforms.beam.stats",
    "WriteShards": "transforms.beam.write_shards",
    "in_process_options": "transforms.beam.runner",
    # tf.data input stage (imports TensorFlow, never Beam)
    "make_dataset": "transforms.tfdata.dataset",
    "make_log_dataset": "transforms.tfdata.log_dataset",
    "distribute": "transforms.tfdata.service",
    "Coo": "transforms.tfdata.coo",  # = ops.Coo
    "to_coo": "transforms.tfdata.coo",
    "pad_to_capacity": "transforms.tfdata.coo",
    "hash_ids": "transforms.tfdata.ids",
    "truncate": "transforms.tfdata.ids",
    "InputState": "transforms.tfdata.core.state",
    "MISSING_INT": "transforms.tfdata.core.columns",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'transforms' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
