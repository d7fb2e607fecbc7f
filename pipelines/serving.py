"""Export a trained model whose serving signatures take a log's raw cells, read and mapped as the ingest did.

Serving is the training path: the signature parses each cell with the rules
the ingest read its log with (`list_separator`, `null_values`, the column
dtypes: `transforms.tfdata.logs.cells`, from the ingest's `_MANIFEST.json`)
and maps raw ids with the very specs the ingest applied (schema.json and
`vocab/`: `sparse_io.id_maps`, run by their graph side), so a row scored at
serving time sees exactly the model inputs `make_dataset` builds from the
shards. A cell the ingest would have refused fails the call, naming its column.
Columns the ingest joined from side tables (`join:`) are inputs like the log's
own: the caller supplies them, as the table writes them (its list separator
and null tokens).

Signatures of a click model (`export_serving_model`), over the columns the
model uses (its sparse and dense features; the label, timestamps and the
log's other columns are not inputs):
  `serving_default`: a sparse column as its raw cell, string `[B]` ("a|b",
    a null token or "" for none); a dense column in the dtype the ingest
    declared: float32 or float64 (NaN when missing), int64 (the int64
    minimum, `transforms.MISSING_INT`, when missing);
  `serving_text`: every column as its raw cell, string `[B]` (a dense one
    as the log writes it: "1.5", "260.0", a null token);
  a cross (schema.json `cross`) is no input: its source columns are, and the
    signature crosses their raw values as the ingest did (`pipelines.serving_crosses`);
    features sharing a vocabulary look up its one file (`vocab/<shared>.txt`);
  output: `probability` float32 `[B]` (a regression model: `prediction`, in
    the label's units).
A derived feature (schema.json `transform`: bucketized or scaled at ingest)
is no input of its own: the signature takes its source column's cell and
applies the ingest's boundaries or scale parameters (`sparse_io.numeric_maps`,
run by `transforms.tfdata.numeric.GraphNumericMap`).
The module also holds `model_inputs(cells)`: the cells of `serving_text` ->
the model's inputs (per sparse feature its COO `row_ids`, `col_ids`,
`gains`, `sample_count`; per dense feature its `[B]` values), for checking
what the model sees. `serving_inputs` drops a row's other columns before a call.

Signature of a history model (`export_history_model`), item feature `f`:
  inputs: `f` string `[B]` (the history's raw ids joined by the ingest's
    `list_separator`, oldest first; only the `histories.max_length` most
    recent are kept, as at ingest), `f__weights` string `[B]` (their weights
    joined the same way, when the history is weighted), `target_f` string
    `[B]` (the raw id to score), and the model's side inputs (schema.json's
    `history_role`s): an event column's or item column's list as its raw
    cell (an item column's list is cut to the same `max_length` most recent
    entries), `target_<item column>` as its raw cell, a number as float32
    (NaN when missing);
  output: `rating` float32 `[B]` (task rating) or `score` float32 `[B]`
    (task next_item: higher means more likely next).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import tensorflow as tf

import ops
from pipelines.serving_crosses import CrossInputs
from sparse_io.id_maps import spec_of_feature
from sparse_io.manifest import ManifestError, read_manifest
from sparse_io.numeric_maps import derived_of_feature
from sparse_io.schema import FeatureSpec, Schema, SchemaError, weights_column
from transforms.tfdata.core.columns import MISSING_INT, dense_dtype
from transforms.tfdata.ids import GraphIdMap, truncate
from transforms.tfdata.logs.cells import CellRules, parse_cells
from transforms.tfdata.numeric import GraphNumericMap, missing_mask

__all__ = ["export_serving_model", "export_history_model", "IngestReading", "serving_inputs"]

_TARGET = "target_"  # a history example's target columns: target_<item>, target_<item column>


@dataclasses.dataclass(frozen=True)
class IngestReading:
    """How an ingest read its log: the cell rules and each column as the log held it (before ids).

    Attributes:
      rules: list separator, null tokens, format.
      raw: the config's schema (a hashed string column is a string here; schema.json says int64).
      history_max_length: the ingest's `histories.max_length`, or None for a flat log.
    """

    rules: CellRules = CellRules()
    raw: Schema | None = None
    history_max_length: int | None = None

    @classmethod
    def load(cls, ingest_dir: str) -> IngestReading:
        """The reading recorded in `ingest_dir/_MANIFEST.json`.

        Raises:
          ManifestError: there is no manifest, or it records no ingest config.
        """
        config = read_manifest(ingest_dir).get("config")
        if not isinstance(config, dict) or "schema" not in config:
            raise ManifestError(f"{ingest_dir}: _MANIFEST.json records no ingest config, so the rules its log was "
                                "read with are unknown; ingest it again with this version")
        histories = config.get("histories") or {}
        return cls(CellRules.from_config_record(config), Schema.from_dict(config["schema"]),
                   histories.get("max_length"))

    def raw_spec(self, spec: FeatureSpec) -> FeatureSpec:
        """`spec` (from schema.json) with the dtype its column had in the log."""
        if self.raw is not None and spec.name in self.raw:
            return dataclasses.replace(spec, dtype=self.raw[spec.name].dtype)
        return spec


def _read(path: str) -> bytes:
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except tf.errors.NotFoundError:
        raise FileNotFoundError(path) from None


class _IdMaps(tf.Module):
    """One `GraphIdMap` per mapped sparse feature: the graph side of the ingest's id specs."""

    def __init__(self, specs, vocab_dir: str | None):
        super().__init__()
        self.maps = {}
        for spec in specs:
            id_spec = spec_of_feature(spec, vocab_dir, read=_read)
            if id_spec is None and spec.dtype == "string":
                raise SchemaError(f"feature {spec.name!r}: neither hash_buckets nor a vocabulary in schema.json; "
                                  "cannot map raw ids at serving time")
            if id_spec is not None:
                self.maps[spec.name] = GraphIdMap(id_spec)

    def __call__(self, name: str, ids):
        """int64 ids of feature `name`'s raw ids (kept as they are where the ingest mapped none)."""
        return self.maps[name](ids) if name in self.maps else tf.cast(ids, tf.int64)


def _model_columns(model, schema: Schema, reading: IngestReading) -> tuple[list[FeatureSpec], list[FeatureSpec]]:
    sparse = [reading.raw_spec(schema[name]) for name in model.vocab_sizes]
    dense = [reading.raw_spec(schema[name]) for name in model.dense_features]
    return sparse, dense


class _DerivedMaps(tf.Module):
    """The model's derived features (schema.json `transform`): each one's source column and graph map."""

    def __init__(self, schema: Schema, reading: IngestReading, specs):
        super().__init__()
        made = {s.name: derived_of_feature(s) for s in specs}
        self.features = {name: f for name, f in made.items() if f is not None}
        self.maps = {name: GraphNumericMap(f.spec) for name, f in self.features.items()}
        self.sources = [reading.raw_spec(schema[s]) for s in sorted({f.source for f in self.features.values()})]

    def read(self, specs) -> list:
        """`specs` less the derived features, plus the source columns they are computed from."""
        kept = [s for s in specs if s.name not in self.features]
        return kept + [s for s in self.sources if s.name not in {k.name for k in kept}]

    def __call__(self, name: str, values, combiner: str):
        """The model input of derived feature `name` from its source's parsed `[B]` values."""
        out = self.maps[name](values, missing_mask(values, MISSING_INT))
        return ops.to_coo(out, combiner=combiner) if isinstance(out, tf.RaggedTensor) else out


def _model_inputs(cells: Mapping, sparse, dense, id_maps: _IdMaps, rules: CellRules, combiner: str,
                  crosses: CrossInputs | None = None, derived: _DerivedMaps | None = None) -> dict:
    from pipelines.model import BATCH_ROWS

    typed = {name: value for name, value in cells.items() if value.dtype != tf.string}
    text = {name: value for name, value in cells.items() if value.dtype == tf.string}
    wanted = {s.name for s in [*sparse, *dense]}
    if derived is not None and derived.features:
        sparse, dense = [s for s in sparse if s.name not in derived.features], derived.read(dense)
    known = {s.name for s in [*sparse, *dense]}
    sources = [s for s in (crosses.sources if crosses else []) if s.name not in known]
    columns = parse_cells(text, [*sparse, *(s for s in [*dense, *sources] if s.name in text)], rules)
    inputs = {}
    if crosses is not None:  # crossed from the sources' raw values, as the ingest did
        for name, ids in crosses({**typed, **columns}).items():
            inputs[name] = ops.to_coo(ids, combiner=combiner)
    for name in derived.features if derived is not None else ():
        source = derived.features[name].source
        inputs[name] = derived(name, columns[source] if source in columns else typed[source], combiner)
    for spec in sparse:
        weights = columns.get(weights_column(spec.name))
        inputs[spec.name] = ops.to_coo(id_maps(spec.name, columns[spec.name]), weights=weights, combiner=combiner)
    for spec in dense:
        if spec.name in wanted:  # a derived feature's source is read, but not given when the model does not use it
            inputs[spec.name] = columns[spec.name] if spec.name in columns else typed[spec.name]
    inputs[BATCH_ROWS] = tf.shape(next(iter(cells.values())), out_type=tf.int32)[0]
    return inputs


def _save(module: tf.Module, model, signatures: dict, export_dir: str) -> str:
    # The variables, not the Keras model: a tracked Keras model would add its own
    # signature traced from the training inputs.
    module.model_variables = list(model.variables)
    # Serving never differentiates; the custom gradients of the bag and block-sparse
    # ops capture graph-local tensors that a SavedModel cannot hold.
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    # Traced with stock ops only: the export must load where sparseflow's native library is absent.
    with ops.stock_ops_only():
        tf.saved_model.save(module, export_dir, signatures=signatures, options=options)
    return export_dir


def export_serving_model(model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None,
                         combiner: str = "mean", reading: IngestReading | None = None,
                         output: str = "probability") -> str:
    """Writes a SavedModel of a `CtrModel` with the raw-cell signatures (module doc); returns the path.

    Args:
      model: the trained `CtrModel`.
      schema: the shards' schema.json (the id specs: hash settings, vocabulary OOV counts).
      export_dir: where the SavedModel goes.
      vocab_dir: the ingest's `vocab/`, for vocabulary features.
      combiner: the bag combiner the model was trained with.
      reading: how the ingest read its log (`IngestReading.load(ingest_dir)`); default: CSV
        rules ("|" lists, "" missing) and schema.json's dtypes.
      output: "probability" (a click model: the sigmoid of its logit) or "prediction" (a regression
        model: its output as it is, in the label's units).

    Raises:
      SchemaError: a string feature with no id mapping, a vocabulary file missing or of another size.
    """
    if output not in ("probability", "prediction"):
        raise ValueError(f"output must be 'probability' or 'prediction', got {output!r}")
    reading = reading or IngestReading()
    sparse, dense = _model_columns(model, schema, reading)
    module = tf.Module()
    # A cross is no log column: the signature takes its sources' cells (pipelines.serving_crosses); a derived
    # feature takes its source column's.
    module.crosses = CrossInputs(sparse, schema, reading.raw)
    module.derived = _DerivedMaps(schema, reading, sparse + dense)
    sparse = [s for s in sparse if not s.cross]
    read_sparse = [s for s in sparse if s.name not in module.derived.features]
    module.id_maps = _IdMaps(read_sparse, vocab_dir)
    read_dense = module.derived.read(dense)
    weighted = [weights_column(s.name) for s in read_sparse if s.weighted]
    sources = [s for s in module.crosses.sources if s.name not in {f.name for f in read_sparse + read_dense}]
    text = {name: tf.TensorSpec([None], tf.string, name=name)
            for name in [s.name for s in read_sparse + read_dense + sources] + weighted}
    typed = {**{name: text[name] for name in [s.name for s in read_sparse + sources if s.is_sparse] + weighted},
             **{s.name: tf.TensorSpec([None], tf.as_dtype(dense_dtype(s.dtype)), name=s.name)
                for s in read_dense + [s for s in sources if not s.is_sparse]}}

    def flat_inputs(cells):  # the model's inputs, each COO as its three arrays
        inputs = _model_inputs(cells, sparse, dense, module.id_maps, reading.rules, combiner, module.crosses,
                               module.derived)
        return {name: (v.row_ids, v.col_ids, v.gains) if isinstance(v, ops.Coo) else v for name, v in inputs.items()}

    # Tracing a wide log's parsing and COO conversion costs seconds per feature, so it is traced once: on the
    # typed cells. The text signatures parse their dense cells to those types first (what `flat_inputs` would do
    # with them), and all signatures share one trace of the model. The save traces them all: a trace made before
    # it would not be reused (a function's trace cache is keyed by the save's variable policy).
    typed_inputs = tf.function(flat_inputs, input_signature=[typed])
    numeric = [s for s in read_dense + sources if not s.is_sparse]

    def typed_cells(cells):
        return {**cells, **parse_cells({s.name: cells[s.name] for s in numeric}, numeric, reading.rules)}

    @tf.function
    def scored(flat):
        from pipelines.model import BATCH_ROWS

        rows = flat[BATCH_ROWS]
        value = model({name: ops.Coo(*v, rows) if isinstance(v, tuple) else v for name, v in flat.items()},
                      training=False)
        return {output: tf.sigmoid(value) if output == "probability" else value}

    serve = tf.function(lambda cells: scored(typed_inputs(cells)), input_signature=[typed])
    serve_text = tf.function(lambda cells: scored(typed_inputs(typed_cells(cells))), input_signature=[text])

    @tf.function(input_signature=[text])
    def model_inputs(cells):
        from pipelines.model import BATCH_ROWS

        flat = typed_inputs(typed_cells(cells))
        rows = flat[BATCH_ROWS]
        return {name: (dict(zip(("row_ids", "col_ids", "gains", "sample_count"), (*v, rows)))
                       if isinstance(v, tuple) else v)
                for name, v in flat.items()
                if name in text or name in module.crosses.maps or name in module.derived.features}

    module.serve, module.serve_text, module.model_inputs = serve, serve_text, model_inputs
    return _save(module, model, {"serving_default": serve, "serving_text": serve_text}, export_dir)


def export_history_model(model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None,
                         reading: IngestReading | None = None) -> str:
    """Writes a SavedModel of a `HistoryModel` taking raw ids (see the module doc); returns the path.

    Side inputs are taken raw as well: a list of ids as one string (joined by
    "|"), a number as float32 (NaN when missing), a target item column's value
    as a string. Ids are hashed, or looked up in `vocab_dir`'s vocabularies,
    as the ingest did.

    Raises:
      SchemaError: the item feature or a side list has neither hash_buckets nor a vocabulary.
    """
    reading = reading or IngestReading()
    item, target = model.item_feature, model.target_feature
    spec = reading.raw_spec(schema[item])
    targets = {name: name[len(_TARGET):] for name in model.target_sides}  # target_<column> -> <column>
    side_specs = [reading.raw_spec(schema[name]) for name in model.side_sparse]
    item_lists = {s.name for s in side_specs if s.history_role == "item_column"}
    mapped = {s.name: s for s in [spec, *side_specs, *(reading.raw_spec(schema[c]) for c in targets.values())]}
    module = tf.Module()
    module.id_maps = _IdMaps(list(mapped.values()), vocab_dir)
    target_spec = FeatureSpec(target, "sparse", spec.dtype)
    target_side_specs = [FeatureSpec(name, "sparse", mapped[column].dtype) for name, column in targets.items()]
    signature = {item: tf.TensorSpec([None], tf.string, name=item),
                 target: tf.TensorSpec([None], tf.string, name=target)}
    signature.update({name: tf.TensorSpec([None], tf.string, name=name) for name in [*model.side_sparse, *targets]})
    signature.update({name: tf.TensorSpec([None], tf.float32, name=name) for name in model.side_dense})
    weights = weights_column(item)
    if spec.weighted:
        signature[weights] = tf.TensorSpec([None], tf.string, name=weights)
    target_dtype = tf.as_dtype(dense_dtype(schema[target].dtype)) if target in schema else tf.float32

    @tf.function(input_signature=[signature])
    def serve(raw):
        columns = parse_cells(raw, [spec, target_spec, *side_specs, *target_side_specs], reading.rules)
        ids, gains = module.id_maps(item, columns[item]), columns.get(weights)
        if reading.history_max_length:  # the ingest kept the most recent events only
            ids = truncate(ids, reading.history_max_length)
            gains = truncate(gains, reading.history_max_length) if gains is not None else None
        for name in [target, *targets]:
            one = tf.reduce_all(tf.equal(columns[name].row_lengths(), 1))
            tf.debugging.Assert(one, [f"column {name!r}: each row needs exactly one id"])
        target_ids = module.id_maps(item, columns[target]).flat_values
        inputs = {item: ops.to_coo(ids, weights=gains, combiner=model.combiner),
                  target: tf.cast(target_ids, target_dtype)}
        for side in side_specs:
            side_ids = module.id_maps(side.name, columns[side.name])
            if side.name in item_lists and reading.history_max_length:  # parallel to the item list
                side_ids = truncate(side_ids, reading.history_max_length)
            inputs[side.name] = ops.to_coo(side_ids, combiner=model.combiner)
        for name, column in targets.items():
            inputs[name] = tf.cast(module.id_maps(column, columns[name]).flat_values, tf.int64)
        inputs.update({name: raw[name] for name in model.side_dense})
        output = model(inputs, training=False)
        if model.task == "next_item":
            return {"score": tf.linalg.diag_part(output)}
        return {"rating": output}

    module.serve = serve
    return _save(module, model, {"serving_default": serve}, export_dir)


def serving_inputs(signature, row_cells: Mapping) -> dict:
    """The inputs of `signature` (a loaded SavedModel's signature) taken from `row_cells`; other columns dropped.

    `row_cells` maps column -> a list (or array) of values, as a log's rows
    give them; the columns the signature does not take (the label,
    timestamps, columns the model does not use) are ignored.

    Raises:
      KeyError: a column the signature needs is absent, naming it.

    Example:
      >>> import tempfile
      >>> module = tf.Module()
      >>> module.f = tf.function(lambda cells: {"length": tf.strings.length(cells["user"])},
      ...                        input_signature=[{"user": tf.TensorSpec([None], tf.string, name="user")}])
      >>> path = tempfile.mkdtemp()
      >>> tf.saved_model.save(module, path, signatures={"serving_text": module.f})
      >>> served = tf.saved_model.load(path).signatures["serving_text"]
      >>> served(**serving_inputs(served, {"user": ["u1"], "clicked": ["1"]}))["length"].numpy()  # no "clicked"
      array([2], dtype=int32)
    """
    specs = signature.structured_input_signature[1]
    missing = sorted(set(specs) - set(row_cells))
    if missing:
        raise KeyError(f"the serving signature needs column(s) {missing}, absent from the row")
    return {name: tf.constant(row_cells[name], spec.dtype) for name, spec in specs.items()}
