"""What every tf.data source shares: options, columns, capacities, sharding, epochs, files, state and the finish.

A source (`columnar`, `logs`, `tfrecord`) ends in a `finish.RawBatch`; `finish`
turns it into the delivered element the same way for all of them. No module
here imports a source.
"""
