"""transforms: the Beam and tf.data steps of the flow.

Nothing heavy is imported here: `transforms.HashIds` imports Beam (not
TensorFlow) on first use, and the tf.data names import TensorFlow (not Beam),
so a Beam worker never pays for TensorFlow and a trainer never for Beam.

Example:
  >>> import transforms
  >>> transforms.HashIds.__module__
  'transforms.beam.hash_ids'
"""

from __future__ import annotations

import importlib

# public name -> module that defines it
_LAZY = {
    "ReadLogs": "transforms.beam.read_logs",
    "HashIds": "transforms.beam.hash_ids",
    "hash_ids_arrow": "sparse_io.hashing",
    "ComputeVocabulary": "transforms.beam.vocabulary",
    "ApplyVocabulary": "transforms.beam.vocabulary",
    "GroupHistories": "transforms.beam.histories",
    "ComputeStats": "transforms.beam.stats",
    "WriteShards": "transforms.beam.write_shards",
    "in_process_options": "transforms.beam.runner",
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
