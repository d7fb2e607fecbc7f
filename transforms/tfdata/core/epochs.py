"""Epochs as data: `Dataset.range(epochs).flat_map(one_epoch)` with seeds derived from the epoch.

`shuffle(reshuffle_each_iteration=True)` under `repeat` draws each epoch's
seed from a generator whose state a checkpointed iterator does not reliably
carry across processes (and which datasets with equal seeds share in one
process), so a restored iterator could replay a different later epoch. Here
each epoch is a function of its number instead: epoch e shuffles with seeds
computed from (seed, e), and a restored iterator rebuilds exactly the epoch
it was in and every one after.

A shuffle the caller did not seed draws its seed when the dataset is made, so
a new process restoring a checkpoint would draw another; `seed_in_state`
makes that seed part of what the iterator saves.

A single epoch needs no epoch loop: the sources then start from the list of
files itself (`file_order`), which is what the tf.data service splits between
its workers (`transforms.distribute`), and the seed travels in the state of
a `scan` rather than as the element of an outer `flat_map`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

__all__ = ["over_epochs", "epoch_seed", "draw_seed", "seed_in_state", "plain", "seeded_shuffle", "file_order"]

# Every function this package hands to tf.data uses Python control flow on
# static facts only; autograph's conversion would find nothing to convert and
# multiplies tracing time (seconds per dataset), so it is turned off.
plain = tf.autograph.experimental.do_not_convert

_ENDLESS = 1 << 62
_STRIDE = 1_000_003  # seeds of different epochs and streams never collide for streams < _STRIDE


def seeded_shuffle(dataset: tf.data.Dataset, buffer_size: int, seed: tf.Tensor) -> tf.data.Dataset:
    """`dataset.shuffle(buffer_size, seed, reshuffle_each_iteration=False)` for a tensor `seed`.

    TensorFlow combines an op seed with the global seed by comparing the pair
    to (0, 0) in Python, which fails on a tensor op seed when the global seed
    is 0 (`tf.random.set_seed(0)`, `keras.utils.set_random_seed(0)`). The op
    seed here already identifies the epoch and stream, so the global seed is
    left out of this shuffle: its order depends on our seed alone.
    """
    graph = tf.compat.v1.get_default_graph()
    saved = graph.seed
    graph.seed = None
    try:
        return dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=False)
    finally:
        graph.seed = saved


def draw_seed() -> int:
    """A fresh random seed, for shuffles the caller did not seed."""
    return int(np.random.SeedSequence().entropy % (1 << 40))


def seed_in_state(seed: int, build: Callable[[tf.Tensor], tf.data.Dataset]) -> tf.data.Dataset:
    """`build(seed)`, with `seed` (an int64 scalar tensor there) kept in every iterator's saved state.

    The seed is the one element of a dataset that `flat_map` turns into
    `build(seed)`. A `flat_map` iterator saves the element its current inner
    iterator was built from and, when restored, rebuilds that inner dataset
    from the saved element rather than from its input: an iterator restored
    in a process that drew another seed goes on with the one it was saved
    with. (Only a checkpoint saved before the first element was read starts
    afresh, with this dataset's seed: nothing of the order was used yet.)

    Example:
      >>> ds = seed_in_state(draw_seed(), lambda s: tf.data.Dataset.range(4).shuffle(4, seed=s))  # doctest: +SKIP
    """
    return tf.data.Dataset.from_tensors(tf.constant(seed, tf.int64)).flat_map(plain(build))


def epoch_seed(seed: int | tf.Tensor, epoch: tf.Tensor, stream: int = 0) -> tf.Tensor:
    """An int64 seed for `stream` (a file number, say) of `epoch`: distinct per (epoch, stream).

    `seed` is a non-negative int, or an int64 scalar tensor (see `seed_in_state`); equal values give equal seeds.
    """
    if isinstance(seed, int):
        base = tf.constant(seed % (1 << 40), tf.int64) * _STRIDE
    else:
        base = tf.math.floormod(tf.cast(seed, tf.int64), 1 << 40) * _STRIDE
    return (base + tf.cast(epoch, tf.int64) * _STRIDE + stream) % ((1 << 62) - 1)


def over_epochs(num_epochs: int | None, one_epoch: Callable[[tf.Tensor], tf.data.Dataset]) -> tf.data.Dataset:
    """`one_epoch(0)`, `one_epoch(1)`, ... concatenated (`num_epochs` None: endlessly)."""
    epochs = tf.data.Dataset.range(_ENDLESS if num_epochs is None else num_epochs)
    return epochs.flat_map(plain(one_epoch))


def file_order(count: int, seed: int | tf.Tensor | None, epoch: int | tf.Tensor) -> tf.data.Dataset:
    """The file numbers `0..count-1`, as `(seed, number)` int64 pairs: permuted by (seed, epoch), or in order.

    The numbers come from a `Dataset.range` that is the first source dataset
    of the pipeline built on it, so the tf.data service's dynamic sharding
    (`distributed_epoch`) hands them out one by one, and its static file
    sharding keeps every n-th, before the permutation maps each to a file.
    A shuffle buffer of the file names would instead pull every name into
    the first worker that asks.

    With a `seed` (an int, or an int64 scalar tensor as `seed_in_state`
    gives), the permutation and the seed are the state of a `scan`, which an
    iterator checkpoint saves: an iterator restored in a process that drew
    another seed goes on with the files and seed it was saved with. Without
    one, the seed element is 0 and the numbers are in order.

    Example:
      >>> sorted(int(n) for _, n in file_order(4, 7, 0))
      [0, 1, 2, 3]
    """
    numbers = tf.data.Dataset.range(count)
    if seed is None:
        return numbers.map(plain(lambda n: (tf.constant(0, tf.int64), n)))
    seed = tf.constant(seed, tf.int64) if isinstance(seed, int) else tf.cast(seed, tf.int64)
    permutation = tf.random.experimental.stateless_shuffle(
        tf.range(count, dtype=tf.int64), tf.stack([epoch_seed(seed, epoch, 0), 0]), alg="philox"
    )

    def pick(state, n):
        return state, (state[0], tf.gather(state[1], n))

    return numbers.scan((seed, permutation), plain(pick))
