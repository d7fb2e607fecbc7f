"""The Parquet and Arrow shard source: a Python-side reader behind one `tf.py_function`.

source (the tf.data entry: numbered batches as `RawBatch`es)
-> reader (`ColumnarSource`: units to numbered batches; row_plan, unit_loader,
column_check) -> csr_assembly / coo_assembly (numpy_coo, or native_batch's
kernels over the units' Arrow buffers) into batch_arrays, handed over as
batch_layout; exit_drain lets the process exit with an iterator alive.
"""
