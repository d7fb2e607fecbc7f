"""make_log_dataset against an independent Python parse: the real Criteo sample, synthetic logs, bad lines."""

import csv
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from sparse_io import criteo_schema
from sparse_io.schema import FeatureSpec, Schema
from transforms import make_log_dataset
from transforms.tfdata.logs.source import log_compression

BINS = 1 << 16
HEX = "0123456789abcdef"


def _expected_criteo(lines):
    """Rows parsed in plain Python: fields padded to 40, I as float (NaN if empty), C hashed as Keras does."""
    rows = []
    for line in lines:
        fields = line.rstrip("\r\n").split("\t")
        fields += [""] * (40 - len(fields))
        rows.append(
            {
                "label": int(fields[0]),
                "I": [float(v) if v else math.nan for v in fields[1:14]],
                "C": [[v] if v else [] for v in fields[14:40]],
            }
        )
    hashing = keras.layers.Hashing(num_bins=BINS)
    flat = [v for r in rows for c in r["C"] for v in c]
    buckets = iter(np.asarray(hashing(tf.constant(flat))).reshape(-1).tolist()) if flat else iter([])
    for r in rows:
        r["C"] = [[next(buckets)] if c else [] for c in r["C"]]
    return rows


def _got(ds):
    rows = []
    for features, label in ds:
        dense = np.stack([features[f"I{i}"].numpy() for i in range(1, 14)], axis=1)
        sparse = [features[f"C{i}"].to_list() for i in range(1, 27)]
        for k, y in enumerate(label.numpy().tolist()):
            rows.append({"label": y, "I": dense[k].tolist(), "C": [sparse[c][k] for c in range(26)]})
    return rows


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["label"] == w["label"] and g["C"] == w["C"]
        np.testing.assert_array_equal(np.float32(g["I"]), np.float32(w["I"]))


def test_the_real_criteo_tsv_sample_matches_a_python_parse(criteo_data_dir):
    files = sorted(str(p) for p in criteo_data_dir.glob("criteo_paddlerec_*.tsv"))
    lines = [line for f in files for line in open(f, encoding="utf-8").read().splitlines()]
    padded = tf.Variable(0, dtype=tf.int64)
    ds = make_log_dataset(files, "criteo", 64, hash_bins=BINS, output="ragged", shuffle=False, padded_lines=padded)
    _same(_got(ds), _expected_criteo(lines))
    assert int(padded.numpy()) == 75  # 36 + 39 lines lost trailing fields (see the data README)


def test_the_real_criteo_csv_sample_with_a_header_matches_a_python_parse(criteo_data_dir):
    path = str(criteo_data_dir / "criteo_deepctr_sample.csv")
    with open(path, encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    ds = make_log_dataset(path, "csv", 48, schema=criteo_schema(), hash_bins=BINS, output="ragged")
    want = _expected_criteo(
        [
            "\t".join(
                [r["label"].split(".")[0]] + [r[f"I{i}"] for i in range(1, 14)] + [r[f"C{i}"] for i in range(1, 27)]
            )
            for r in records
        ]
    )
    _same(_got(ds), want)


def _synthetic(rng, n):
    lines = []
    for _ in range(n):
        label = str(rng.integers(0, 2))
        dense = ["" if rng.random() < 0.2 else str(int(rng.integers(-3, 1000))) for _ in range(13)]
        cats = ["" if rng.random() < 0.1 else "".join(rng.choice(list(HEX), 8)) for _ in range(26)]
        fields = [label, *dense, *cats]
        if rng.random() < 0.3:  # lose trailing empty fields, as real dumps do
            while fields and fields[-1] == "":
                fields.pop()
        lines.append("\t".join(fields))
    return lines


BAD = {
    "letters in I3": lambda f: f[:3] + ["12x"] + f[4:],
    "short hex in C2": lambda f: f[:15] + ["abc"] + f[16:],
    "41 fields": lambda f: f + [""] * (40 - len(f)) + ["x"],
    "no label": lambda f: [""] + f[1:],
}


def test_bad_lines_are_counted_and_skipped_and_batches_stay_exact(tmp_path):
    rng = np.random.default_rng(5)
    good = _synthetic(rng, 400)
    lines, kept = [], []
    for k, line in enumerate(good):
        if k % 37 == 5:
            fields = line.split("\t")
            fields += [""] * (40 - len(fields))
            lines.append("\t".join(list(BAD.values())[k % 4](fields)))
        else:
            lines.append(line)
            kept.append(line)
    paths = []
    for part in range(2):
        path = tmp_path / f"day_{part}.tsv"
        path.write_text("\n".join(lines[part * 200 : (part + 1) * 200]) + "\n")
        paths.append(str(path))
    bad = tf.Variable(0, dtype=tf.int64)
    ds = make_log_dataset(
        paths, "criteo", 50, hash_bins=BINS, output="ragged", on_error="skip", bad_lines=bad, lines_per_chunk=64
    )
    batches = list(ds)
    _same(_got(batches), _expected_criteo(kept))
    assert int(bad.numpy()) == len(lines) - len(kept)
    assert [int(label.shape[0]) for _, label in batches] == [50] * (len(kept) // 50) + [len(kept) % 50]

    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"day_0.tsv:6: bad line: field C2 is not an 8-digit hex string or empty: .*abc",
    ):
        list(make_log_dataset(paths, "criteo", 50, hash_bins=BINS, output="ragged"))


def test_three_workers_split_the_lines_of_two_files_without_overlap(tmp_path):
    rng = np.random.default_rng(6)
    lines = _synthetic(rng, 90)
    paths = []
    for part in range(2):  # fewer files than workers: every worker takes every third line of each
        path = tmp_path / f"part{part}.tsv"
        path.write_text("\n".join(lines[part * 45 : (part + 1) * 45]))
        paths.append(str(path))
    seen = []
    for index in range(3):
        ds = make_log_dataset(
            paths, "criteo", 16, hash_bins=BINS, output="ragged", num_shards=3, index=index, shuffle=True, seed=1
        )
        part = _got(ds)
        assert part
        seen += part
    key = lambda r: (r["label"], r["C"], str(r["I"]))  # noqa: E731
    want = _expected_criteo(lines)
    assert sorted(map(key, seen)) == sorted(map(key, want))


def test_csv_lists_weights_and_vocabularies(tmp_path):
    schema = Schema(
        [
            FeatureSpec("y", "label", "float32"),
            FeatureSpec("genres", "sparse", "string"),
            FeatureSpec("items", "sparse", "int64", weighted=True),
        ]
    )
    text = 'items,y,items__weights,extra,genres\n3|4|4,1.5,0.5|1|2,zzz,"drama|comedy"\n,0,,,\n7,2.5,3,,noir\n'
    (tmp_path / "log.csv").write_text(text)
    vocab = tmp_path / "genres.txt"
    vocab.write_text("comedy\ndrama\n")
    ds = make_log_dataset(
        str(tmp_path / "log.csv"), "csv", 10, schema=schema, vocabularies={"genres": str(vocab)}, output="ragged"
    )
    features, label = next(iter(ds))
    assert label.numpy().tolist() == [1.5, 0.0, 2.5]
    assert features["items"].to_list() == [[3, 4, 4], [], [7]]
    assert features["items__weights"].to_list() == [[0.5, 1.0, 2.0], [], [3.0]]
    assert features["genres"].to_list() == [[2, 1], [], [0]]  # StringLookup: OOV 0, vocabulary from 1
    coo, _ = next(iter(make_log_dataset(str(tmp_path / "log.csv"), "csv", 10, schema=schema, hash_bins={"genres": 7})))
    assert coo["items"].col_ids.numpy().tolist() == [3, 4, 7]  # adjacent 4s merged
    np.testing.assert_allclose(coo["items"].gains.numpy(), [0.5, 3.0, 3.0])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="format must be one of"):
        make_log_dataset("x", "jsonl", 8)
    with pytest.raises(ValueError, match="bad_lines=tf.Variable"):
        make_log_dataset("x", "criteo", 8, hash_bins=3, on_error="skip")
    with pytest.raises(ValueError, match="needs a schema"):
        make_log_dataset("x", "csv", 8)


def test_a_cut_gzip_log_is_refused_naming_the_file(tmp_path):
    import gzip
    import zlib

    from sparse_io.errors import CorruptFileError

    text = ("\n".join(_synthetic(np.random.default_rng(3), 3000)) + "\n").encode()
    whole = gzip.compress(text)
    cut = tmp_path / "day.tsv.gz"
    cut.write_bytes(whole[: len(whole) * 15 // 100])
    with pytest.raises(CorruptFileError, match="truncated") as info:
        make_log_dataset(str(cut), "criteo", 64, hash_bins=1000)
    assert info.value.path == str(cut)
    compressor = zlib.compressobj(wbits=15)
    zz = compressor.compress(text) + compressor.flush()
    (tmp_path / "day.tsv.zz").write_bytes(zz[: len(zz) // 2])
    with pytest.raises(CorruptFileError, match="truncated"):
        make_log_dataset(str(tmp_path / "day.tsv.zz"), "criteo", 64, hash_bins=1000)
    # The whole files read back every line.
    cut.write_bytes(whole + gzip.compress(b""))  # an empty second member is still whole
    (tmp_path / "day.tsv.zz").write_bytes(zz)
    for name in ("day.tsv.gz", "day.tsv.zz"):
        ds = make_log_dataset(str(tmp_path / name), "criteo", 64, hash_bins=1000, output="ragged")
        assert sum(int(label.shape[0]) for _, label in ds) == 3000


@pytest.mark.parametrize(
    "spec",
    [
        FeatureSpec("C1", "sparse", "int64"),
        FeatureSpec("C1", "sparse", "string", weighted=True),
    ],
)
def test_a_criteo_schema_with_integer_or_weighted_categoricals_is_refused_as_the_ingest_refuses_it(tmp_path, spec):
    # Criteo's categoricals are 8-digit hex strings: read as ints they came out as strings (ragged) or failed in
    # convert_to_coo with a message naming neither the format nor the schema.
    path = tmp_path / "day.tsv"
    path.write_text("1\t5\t68fd1e64\n")
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("I1", "dense", "float32"), spec])
    with pytest.raises(ValueError, match=r"criteo format: sparse feature 'C1' must be an unweighted string feature"):
        make_log_dataset(str(path), "criteo", 4, schema=schema, output="ragged")


@pytest.mark.parametrize(
    "files, error",
    [
        ([], "no log files"),
        (["a.gz", "b.tsv"], "mixes compressed and plain"),
        (["a.gz", "b.zz"], "mixes compressed and plain"),
        (["day_0.zst"], "decompress .zst/.bz2"),
    ],
)
def test_log_compression_names_what_it_cannot_read(files, error):
    with pytest.raises(ValueError, match=error):
        log_compression(files)


def test_log_compression_of_one_kind_of_file():
    assert [log_compression(f) for f in (["a.gz", "b.GZ"], ["a.zz"], ["a.tsv", "b.txt"])] == ["GZIP", "ZLIB", None]
