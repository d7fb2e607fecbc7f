"""The TFRecord shard source: `TFRecordDataset` and `tf.io.parse_example`, graph-native."""
