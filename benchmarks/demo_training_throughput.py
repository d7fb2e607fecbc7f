"""The demo model's training throughput with the native CPU kernels against the stock-op compositions.

    python -m benchmarks.demo_training_throughput [--quick] [--json PATH]

The model and step of `make demo` (pipelines.model.CtrModel: 26 hashed
categorical features of 20,000 buckets, 13 dense ones, 16-dim embeddings,
block-sparse hidden layers 256 and 128 at density 0.25, Adam, batch 1024),
trained on generated COO batches (1-3 Zipf ids per feature and row, "mean"
gains), so that only the step is timed, not the input pipeline. Contenders,
alternating in one run, each call one training step on each of the same
STEPS batches (2 with --quick), each with its own copy of the same initial weights:

  - native: the step as traced on a CPU by default (the fused embedding-bag
    and block-sparse kernels, `ops/native/`);
  - compositions: the same step traced inside `ops.stock_ops_only()` (the
    stock-op compositions, what an exported graph runs);
  - compositions, XLA: the step with `jit_compile=True`, as `make demo`'s
    `--jit_compile` runs it (XLA compiles the compositions; the native
    kernels never run inside it). Not with --quick.

Reported: examples per second (medians and min-max over the rounds) and the
native step's speed over each composition's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", help="also write the results to this file")
    return parser


if __name__ == "__main__":
    _parser().parse_args()  # --help and a bad flag answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ops
from benchmarks._timing import alternate, markdown_table, noisy
from pipelines.model import CtrModel

SPARSE, DENSE, BUCKETS, BATCH, STEPS = 26, 13, 20_000, 1024, 5


def _batches(rng, count: int) -> list[tuple[dict, tf.Tensor]]:
    """`count` (features, labels) batches shaped as make_dataset(output="coo") gives them to the model."""
    batches = []
    for _ in range(count):
        features = {}
        for f in range(SPARSE):
            lengths = rng.integers(1, 4, BATCH)
            rows = np.repeat(np.arange(BATCH), lengths).astype(np.int64)
            cols = ((rng.zipf(1.3, rows.size) - 1) % BUCKETS).astype(np.int64)
            gains = np.repeat(1.0 / lengths, lengths).astype(np.float32)
            features[f"C{f}"] = (tf.constant(rows), tf.constant(cols), tf.constant(gains))
        for d in range(DENSE):
            features[f"I{d}"] = tf.constant(rng.exponential(10.0, BATCH).astype(np.float32))
        batches.append((features, tf.constant(rng.integers(0, 2, BATCH).astype(np.float32))))
    return batches


def _model() -> CtrModel:
    model = CtrModel({f"C{f}": BUCKETS for f in range(SPARSE)}, [f"I{d}" for d in range(DENSE)], seed=0)
    model.build()
    return model


def _trainer(weights: list, batches, *, stock: bool, jit_compile: bool):
    """A callable running one training step per batch of `batches` on a fresh model holding `weights`."""
    model = _model()
    model.set_weights(weights)
    optimizer = keras.optimizers.Adam(2e-3)
    optimizer.build(model.trainable_variables)

    def step(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # One signature for every batch (their COO lengths differ), so that the one trace made here, inside
    # stock_ops_only() when asked, serves every call.
    signature = tf.nest.map_structure(lambda t: tf.TensorSpec([None], t.dtype), batches[0])
    compiled = tf.function(step, input_signature=signature, jit_compile=jit_compile)
    if stock:
        with ops.stock_ops_only():
            concrete = compiled.get_concrete_function()
    else:
        concrete = compiled.get_concrete_function()
    uses_native = any(op.type.startswith("Sparseflow") for op in concrete.graph.get_operations())

    def run() -> float:
        loss = None
        for features, labels in batches:
            loss = compiled(features, labels)
        return float(loss)

    return run, uses_native


def run(quick: bool = False) -> dict:
    """Times the steps alternately; prints the table and returns it as a JSON-able dict."""
    reps, steps = (2, 2) if quick else (15, STEPS)
    rng = np.random.default_rng(0)
    batches = _batches(rng, steps)
    weights = _model().get_weights()
    contenders, native_ops = {}, {}
    steps_traced = [("native", False, False), ("compositions", True, False)]
    if not quick:  # XLA compiles the step once per batch shape: minutes, too long for a smoke run
        steps_traced.append(("compositions, XLA", True, True))
    for name, stock, jit in steps_traced:
        contenders[name], native_ops[name] = _trainer(weights, batches, stock=stock, jit_compile=jit)
    if not native_ops["native"]:
        raise RuntimeError("the native step traced no native kernel: are they built here? (python -m ops.build)")
    timings = alternate(contenders, reps=reps, warmup=1)
    rows = []
    native = timings["native"]
    for name, t in timings.items():
        rows.append({
            "step": name,
            "native_kernels": native_ops[name],
            "examples_per_s": BATCH * steps / t.median_s,
            "examples_per_s_range": [BATCH * steps / t.max_s, BATCH * steps / t.min_s],
            "ms_per_step": t.median_s / steps * 1e3,
            "native_speedup": t.median_s / native.median_s,
            "noisy": noisy(native, t) if name != "native" else False,
        })
    print(f"\n### Demo model training throughput (batch {BATCH}, {SPARSE} sparse + {DENSE} dense features, "
          f"{reps} rounds of {steps} steps)\n")
    print(markdown_table(rows, ["step", "native_kernels", "examples_per_s", "ms_per_step", "native_speedup",
                                "noisy"]))
    return {"batch": BATCH, "steps_per_call": steps, "reps": reps, "sparse_features": SPARSE,
            "dense_features": DENSE, "buckets": BUCKETS, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    results = run(quick=args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
