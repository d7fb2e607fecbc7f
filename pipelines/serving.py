"""Export a trained model whose serving signature takes the raw ids of the log.

Train/serve consistency: at ingest, `transforms.HashIds` turned each raw id
into `Fingerprint64(id) % num_bins` (or looked it up in `vocab/<f>.txt`);
the exported signature applies `keras.layers.Hashing(num_bins)` (or
`keras.layers.StringLookup(vocabulary=...)`) to the same raw strings, so a
row scored at serving time sees exactly the ids it was trained on.

Signature `serving_default`:
  inputs: every sparse feature as a string `[B]` (several ids joined by "|",
    "" for none) and every dense feature as float32 `[B]` (NaN when missing);
  output: `probability` float32 `[B]`.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf

import ops
from sparse_io.schema import Schema

__all__ = ["export_serving_model", "raw_features_to_model_inputs", "LIST_SEPARATOR"]

LIST_SEPARATOR = "|"


class _RawIdMaps(tf.Module):
    def __init__(self, schema: Schema, vocab_dir: str | None):
        super().__init__()
        self.maps = {}
        for spec in schema.sparse:
            vocab = os.path.join(vocab_dir, f"{spec.name}.txt") if vocab_dir else None
            if spec.hash_buckets:
                self.maps[spec.name] = keras.layers.Hashing(num_bins=spec.hash_buckets)
            elif vocab and os.path.exists(vocab):
                self.maps[spec.name] = keras.layers.StringLookup(vocabulary=vocab, num_oov_indices=1)
            else:
                raise ValueError(
                    f"feature {spec.name!r}: neither hash_buckets in schema.json nor a vocabulary file; "
                    "cannot map raw ids at serving time"
                )


def raw_features_to_model_inputs(raw: dict, schema: Schema, id_maps: dict, combiner: str = "mean") -> dict:
    """Raw strings and floats -> the COO/dense dict `CtrModel` takes (graph function)."""
    inputs = {}
    for spec in schema.sparse:
        tokens = tf.strings.split(raw[spec.name], sep=LIST_SEPARATOR)
        tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
        ids = tf.cast(id_maps[spec.name](tokens), tf.int64)
        inputs[spec.name] = ops.to_coo(ids, combiner=combiner)
    for spec in schema.dense:
        inputs[spec.name] = tf.cast(raw[spec.name], tf.float32)
    return inputs


def export_serving_model(model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None,
                         combiner: str = "mean") -> str:
    """Writes a SavedModel to `export_dir` with the raw-id serving signature; returns the path."""
    id_maps = _RawIdMaps(schema, vocab_dir)
    signature = {spec.name: tf.TensorSpec([None], tf.string, name=spec.name) for spec in schema.sparse}
    signature.update({spec.name: tf.TensorSpec([None], tf.float32, name=spec.name) for spec in schema.dense})

    module = tf.Module()
    # The variables, not the Keras model: a tracked Keras model would add its own
    # signature traced from the training inputs.
    module.model_variables = list(model.variables)
    module.id_maps = id_maps

    @tf.function(input_signature=[signature])
    def serve(raw):
        inputs = raw_features_to_model_inputs(raw, schema, id_maps.maps, combiner)
        return {"probability": tf.sigmoid(model(inputs, training=False))}

    module.serve = serve
    # Serving never differentiates; the custom gradients of the bag and block-sparse
    # ops capture graph-local tensors that a SavedModel cannot hold.
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    tf.saved_model.save(module, export_dir, signatures={"serving_default": serve}, options=options)
    return export_dir
