"""ops: TensorFlow compute for sparse batches (COO conversion, padding to a static capacity)."""

from ops.convert_to_coo import convert_to_coo as convert_to_coo
from ops.pad_coo import pad_coo as pad_coo
from ops.to_coo import to_coo as to_coo
