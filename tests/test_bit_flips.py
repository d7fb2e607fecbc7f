"""A seeded bit-flip campaign: every single-bit flip in a shard is refused with a clear error or changes nothing.

One small ingest output (Parquet, converted to Arrow and TFRecord) is made
once; 200 flips per format go through the readers users call
(`benchmarks.reliability`: iter_shards, the columnar reader inside
make_dataset, make_dataset itself, pipelines.train's reader and
pipelines.convert), each read at the default verify="sizes", which no
same-size change can get past by the manifest alone. The expected data of
each reader is its own read of the intact output.
"""

import pytest

from benchmarks.reliability import FLIP_FORMATS, flip_campaign, small_output

FLIPS = 200
# Costly readers less often than the benchmark's: the campaign stays well under a minute on one core.
SCHEDULE = (("convert", 40), ("train", 25), ("make_dataset", 20))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return small_output(str(tmp_path_factory.mktemp("flips")))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FLIP_FORMATS)
def test_no_bit_flip_in_a_shard_is_read_as_other_data(outputs, fmt):
    result = flip_campaign(outputs[fmt], FLIPS, seed=41 + FLIP_FORMATS.index(fmt), schedule=SCHEDULE)
    counts = result["counts"]
    assert counts["silent"] == 0, result["silent"]
    assert counts["unclear"] == 0, result["unclear"]
    assert sum(counts.values()) == FLIPS
    # The campaign damages data: most flips land in pages, batches or records and are refused.
    assert counts["refused"] > FLIPS // 2
    readers = {r for r, c in result["by_reader"].items() if sum(c.values())}
    expected = {"iter_shards", "make_dataset", "convert"} | ({"columnar", "train"} if fmt != "tfrecord" else set())
    assert readers == expected
