"""A serving export is a graph of stock TensorFlow ops: it loads and scores where sparseflow is not installed."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from ops import _native
from pipelines.model import CtrModel
from pipelines.serving import export_serving_model
from sparse_io.schema import FeatureSpec, Schema

_LOAD_AND_SCORE = """
import json, sys
import tensorflow as tf
served = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = served(user=tf.constant(["u1", "", "u2|u3"]), ad=tf.constant(["a1", "a2", ""]),
             price=tf.constant([1.0, 2.0, 0.5]))
print(json.dumps(out["probability"].numpy().tolist()))
"""


def _export(tmp_path) -> tuple[str, np.ndarray]:
    schema = Schema([
        FeatureSpec("label", "label"),
        FeatureSpec("user", "sparse", dtype="string", hash_buckets=32),
        FeatureSpec("ad", "sparse", dtype="string", hash_buckets=16),
        FeatureSpec("price", "dense", dtype="float32"),
    ])
    # Blocks of 16 over a 64-unit layer: the block-sparse layer and the bag both have native kernels here.
    model = CtrModel({"user": 32, "ad": 16}, ["price"], embedding_dim=16, hidden_units=(64,), block_size=16)
    model.build()
    path = export_serving_model(model, schema, str(tmp_path / "export"))
    raw = {"user": tf.constant(["u1", "", "u2|u3"]), "ad": tf.constant(["a1", "a2", ""]),
           "price": tf.constant([1.0, 2.0, 0.5])}
    in_process = tf.saved_model.load(path).signatures["serving_default"](**raw)["probability"].numpy()
    return path, in_process


def _op_names(export_dir: str) -> set[str]:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    names = {node.op for node in graph.node}
    for function in graph.library.function:
        names |= {node.op for node in function.node_def}
    return names


def test_the_export_holds_no_sparseflow_op_even_where_the_native_kernels_load(tmp_path):
    assert _native.available(), "the native kernels build on every CI machine; this test needs them loaded"
    path, _ = _export(tmp_path)
    assert not [name for name in _op_names(path) if name.lower().startswith("sparseflow")]


def test_the_export_scores_in_a_process_with_plain_tensorflow_only(tmp_path):
    path, in_process = _export(tmp_path)
    # No PYTHONPATH to the repository and a working directory outside it: nothing of sparseflow can load.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_SCORE, path], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    scores = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    assert scores.shape == (3,) and ((scores > 0) & (scores < 1)).all()
    np.testing.assert_allclose(scores, in_process, rtol=1e-5, atol=1e-6)
