"""Export a trained model whose serving signature takes the raw ids of the log.

Train/serve consistency: at ingest, `transforms.HashIds` turned each raw id
into `Fingerprint64(id) % num_bins` (or looked it up in `vocab/<f>.txt`);
the exported signature applies `keras.layers.Hashing(num_bins)` (or
`keras.layers.StringLookup(vocabulary=...)`) to the same raw strings, so a
row scored at serving time sees exactly the ids it was trained on.

Signature `serving_default` of a click model (`export_serving_model`):
  inputs: every sparse feature as a string `[B]` (several ids joined by "|",
    "" for none) and every dense feature as float32 `[B]` (NaN when missing);
  output: `probability` float32 `[B]` (a regression model: `prediction`, in the label's units).

Signature of a history model (`export_history_model`), item feature `f`:
  inputs: `f` string `[B]` (the history's raw ids joined by "|"), `f__weights`
    string `[B]` (their weights joined by "|", when the history is weighted),
    `target_f` string `[B]` (the raw id to score), and the model's side
    inputs: lists of ids as strings joined by "|", numbers as float32,
    `target_<item column>` as a string;
  output: `rating` float32 `[B]` (task rating) or `score` float32 `[B]`
    (task next_item: higher means more likely next).
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf

import ops
from sparse_io.schema import Schema, weights_column

__all__ = ["export_serving_model", "export_history_model", "raw_features_to_model_inputs", "LIST_SEPARATOR"]

LIST_SEPARATOR = "|"


class _RawIdMaps(tf.Module):
    def __init__(self, schema: Schema, vocab_dir: str | None):
        super().__init__()
        self.maps = {}
        for spec in schema.sparse:
            vocab = os.path.join(vocab_dir, f"{spec.name}.txt") if vocab_dir else None
            if spec.hash_buckets:
                self.maps[spec.name] = keras.layers.Hashing(num_bins=spec.hash_buckets, salt=_salt(spec))
            elif vocab and os.path.exists(vocab):
                # The OOV buckets the ingest reserved (schema.json), so every id lands where it did there.
                num_oov = 1 if spec.num_oov_buckets is None else spec.num_oov_buckets
                self.maps[spec.name] = keras.layers.StringLookup(vocabulary=vocab, num_oov_indices=num_oov)
            else:
                raise ValueError(
                    f"feature {spec.name!r}: neither hash_buckets in schema.json nor a vocabulary file; "
                    "cannot map raw ids at serving time"
                )


def _salt(spec):
    """The ingest's hash salt (schema.json) as keras.layers.Hashing takes it."""
    return list(spec.salt) if isinstance(spec.salt, tuple) else spec.salt


def raw_features_to_model_inputs(raw: dict, schema: Schema, id_maps: dict, combiner: str = "mean") -> dict:
    """Raw strings and floats -> the COO/dense dict `CtrModel` takes (graph function)."""
    inputs = {}
    for spec in schema.sparse:
        ids = tf.cast(id_maps[spec.name](_split(raw[spec.name])), tf.int64)
        inputs[spec.name] = ops.to_coo(ids, combiner=combiner)
    for spec in schema.dense:
        inputs[spec.name] = tf.cast(raw[spec.name], tf.float32)
    from pipelines.model import BATCH_ROWS

    inputs[BATCH_ROWS] = tf.shape(next(iter(raw.values())), out_type=tf.int32)[0]
    return inputs


def _save(module: tf.Module, model, serve, export_dir: str) -> str:
    # The variables, not the Keras model: a tracked Keras model would add its own
    # signature traced from the training inputs.
    module.model_variables = list(model.variables)
    module.serve = serve
    # Serving never differentiates; the custom gradients of the bag and block-sparse
    # ops capture graph-local tensors that a SavedModel cannot hold.
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    # Traced with stock ops only: the export must load where sparseflow's native library is absent.
    with ops.stock_ops_only():
        tf.saved_model.save(module, export_dir, signatures={"serving_default": serve}, options=options)
    return export_dir


def _split(raw: tf.Tensor) -> tf.RaggedTensor:
    tokens = tf.strings.split(raw, sep=LIST_SEPARATOR)
    return tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)


def export_history_model(model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None) -> str:
    """Writes a SavedModel of a `HistoryModel` taking raw ids (see the module doc); returns the path.

    Side inputs are taken raw as well: a list of ids as one string (joined by
    "|"), a number as float32 (NaN when missing), a target item column's value
    as a string. Ids are hashed, or looked up in `vocab_dir`'s vocabularies,
    as the ingest did.

    Raises:
      ValueError: an id feature with neither hash_buckets in schema.json nor a vocabulary file.
    """
    item, target = model.item_feature, model.target_feature
    spec = schema[item]
    targets = {name: name[len("target_"):] for name in model.target_sides}
    lists = [item, *model.side_sparse, *targets.values()]
    module = tf.Module()
    module.id_maps = _RawIdMaps(schema.select(dict.fromkeys(lists)), vocab_dir)
    maps = module.id_maps.maps
    signature = {item: tf.TensorSpec([None], tf.string, name=item),
                 target: tf.TensorSpec([None], tf.string, name=target)}
    signature.update({name: tf.TensorSpec([None], tf.string, name=name) for name in [*model.side_sparse, *targets]})
    signature.update({name: tf.TensorSpec([None], tf.float32, name=name) for name in model.side_dense})
    weights = weights_column(item)
    if spec.weighted:
        signature[weights] = tf.TensorSpec([None], tf.string, name=weights)

    @tf.function(input_signature=[signature])
    def serve(raw):
        ids = tf.cast(maps[item](_split(raw[item])), tf.int64)
        gains = tf.strings.to_number(_split(raw[weights])) if spec.weighted else None
        inputs = {item: ops.to_coo(ids, weights=gains, combiner=model.combiner),
                  target: tf.cast(maps[item](raw[target]), tf.float32)}
        for name in model.side_sparse:
            inputs[name] = ops.to_coo(tf.cast(maps[name](_split(raw[name])), tf.int64), combiner=model.combiner)
        for name, column in targets.items():
            inputs[name] = tf.cast(maps[column](raw[name]), tf.int64)
        inputs.update({name: raw[name] for name in model.side_dense})
        output = model(inputs, training=False)
        if model.task == "next_item":
            return {"score": tf.linalg.diag_part(output)}
        return {"rating": output}

    return _save(module, model, serve, export_dir)


def export_serving_model(model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None,
                         combiner: str = "mean", output: str = "probability") -> str:
    """Writes a SavedModel to `export_dir` with the raw-id serving signature; returns the path.

    `output`: "probability" (a click model: the sigmoid of its logit) or "prediction" (a regression model:
    its output as it is, in the label's units).
    """
    if output not in ("probability", "prediction"):
        raise ValueError(f"output must be 'probability' or 'prediction', got {output!r}")
    id_maps = _RawIdMaps(schema, vocab_dir)
    signature = {spec.name: tf.TensorSpec([None], tf.string, name=spec.name) for spec in schema.sparse}
    signature.update({spec.name: tf.TensorSpec([None], tf.float32, name=spec.name) for spec in schema.dense})

    module = tf.Module()
    module.id_maps = id_maps

    @tf.function(input_signature=[signature])
    def serve(raw):
        inputs = raw_features_to_model_inputs(raw, schema, id_maps.maps, combiner)
        value = model(inputs, training=False)
        return {output: tf.sigmoid(value) if output == "probability" else value}

    return _save(module, model, serve, export_dir)
