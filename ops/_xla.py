"""Whether the graph being traced will be compiled by XLA."""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

__all__ = ["in_xla_context"]


def in_xla_context() -> bool:
    """True while tracing a function that XLA compiles (tf.function(jit_compile=True), Keras jit)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
