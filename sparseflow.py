"""sparseflow: the version and where each stage lives.

The project installs four top-level packages, named after the stages of the data flow rather than
after the project (the repository layout is fixed): `sparse_io` (readers, shards, schema, manifest),
`transforms` (the Beam and tf.data steps), `ops` (TensorFlow compute: COO, embedding bags,
block-sparse layers) and `pipelines` (the command-line programs). Another installed package of one
of those names would shadow ours or be shadowed; `packages()` says where each one imports from.

Example:
  >>> import sparseflow
  >>> sparseflow.__version__ == sparseflow.version()
  True
  >>> sorted(sparseflow.PACKAGES)
  ['ops', 'pipelines', 'sparse_io', 'transforms']
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

__all__ = ["PACKAGES", "packages", "version"]

PACKAGES = {
    "sparse_io": "log readers, shard formats, schema.json, the manifest (no TensorFlow, no Beam)",
    "transforms": "the Beam ingest steps (transforms.beam) and the tf.data input (transforms.tfdata)",
    "ops": "TensorFlow compute: COO conversion, embedding bags, block-sparse matmul and layers",
    "pipelines": "the programs: pipelines.ingest, .train, .convert, .verify, .demo",
}


def version() -> str:
    """The installed distribution's version, or "unknown" when the sources run uninstalled."""
    try:
        return importlib.metadata.version("sparseflow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def packages() -> dict[str, str | None]:
    """Each top-level package -> the folder it imports from here (None where it cannot be found).

    Nothing is imported: the lookup is `importlib.util.find_spec`. A folder outside this
    project's checkout or installation means another distribution owns that name.
    """
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        found[name] = os.path.dirname(origin) if origin else None
    return found


__version__ = version()
