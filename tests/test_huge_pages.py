"""Large embedding tables are advised onto transparent huge pages by the native bag; SPARSEFLOW_HUGE_PAGES=0
leaves the pages alone. The results are the same bytes either way
(tests/test_native_embedding_bag.py checks them on both sides of the size limit)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ops import _native

REPO = Path(__file__).resolve().parents[1]
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

pytestmark = [
    pytest.mark.skipif(not _native.available(), reason=f"native kernels unavailable: {_native.unavailable_reason()}"),
    pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="transparent huge pages are off"),
]

# Runs one native bag over a table of `mib` MiB and prints whether the mapping holding the table's rows was
# advised (VmFlags "hg", set by MADV_HUGEPAGE) and the bag's result, beside numpy's.
_PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import ops
    from benchmarks.embedding_huge_pages import mapping_field

    mib = int(sys.argv[1])
    rows = mib * 2**20 // (64 * 4)
    table = tf.constant(np.arange(rows * 64, dtype=np.float32).reshape(rows, 64) % 7)
    view = np.from_dlpack(table)  # shares the tensor's buffer (.numpy() copies)
    address = view.ctypes.data
    cols = np.array([3, rows - 1, 5, 3], np.int64)
    out = ops.embedding_bag(table, tf.constant([0, 0, 1, 2]), tf.constant(cols), tf.constant([1.0, 2.0, 0.5, 1.0]),
                            sample_count=3, implementation="native").numpy()
    t = view
    expected = np.stack([t[3] + 2.0 * t[rows - 1], 0.5 * t[5], t[3]])
    middle = address + rows * 64 * 4 // 2  # inside the 2 MiB-aligned part, whatever the buffer's alignment
    flags = mapping_field(middle, "VmFlags")
    advised = None if flags is None else "hg" in flags.split()
    print(json.dumps({"advised": advised, "equal": bool(np.array_equal(out, expected))}))
""")


def _probe(mib: int, **env) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    done = subprocess.run([sys.executable, "-c", _PROBE, str(mib)], capture_output=True, text=True, env=environment,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_table_of_64_mib_is_advised_onto_huge_pages_and_bags_the_same():
    assert _probe(64) == {"advised": True, "equal": True}


def test_the_switch_turned_off_leaves_the_pages_alone():
    # (A small table is not advised either, but its mapping may be one the allocator shares with buffers
    # something else advised, so VmFlags cannot show it.)
    assert _probe(64, SPARSEFLOW_HUGE_PAGES="0") == {"advised": False, "equal": True}


def test_the_benchmark_compares_both_page_sizes_and_the_kernel_gave_huge_pages(capsys):
    from benchmarks import embedding_huge_pages

    results = embedding_huge_pages.run(quick=True, rounds=1)
    huge, small = results["by_pages"]["huge"], results["by_pages"]["small"]
    assert huge["anon_huge_kib"]["median"] > 0 and small["anon_huge_kib"]["median"] == 0
    assert results["speedup"] > 0  # a ratio, never asserted as a speed
    assert "small-page time / huge-page time" in capsys.readouterr().out
