"""`--vocab_from` takes id spaces only from a committed output whose schema.json and vocabularies are intact.

A held-out ingest reuses the training ingest's vocabulary files: if one of them changed after its commit (two
lines swapped, tokens prepended), two users would exchange ids, or ids would pass the table's size. The source
is verified at "checksums" for what is read from it, and the new output's id space is fingerprinted from the
bytes it copied.
"""

import hashlib
import json
import os
import shutil

import pytest

from pipelines.errors import UsageError
from pipelines.ingest import main, run_ingest
from pipelines.synthetic import synthetic_criteo_lines
from sparse_io.manifest import MANIFEST_FILE, commit_directory
from sparse_io.schema import Schema

CONFIG = """\
input: {format: criteo}
features: {"C*": {hash_buckets: 1000}, C9: {vocabulary: {num_oov_buckets: 2}}}
output: {format: parquet, num_shards: 2, shuffle: true, seed: 5}
stats: {batch_sizes: [32]}
"""


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab_from")
    lines = synthetic_criteo_lines(400, seed=9, max_id=60)
    (root / "train.tsv").write_text("\n".join(lines[:300]) + "\n")
    (root / "heldout.tsv").write_text("\n".join(lines[300:]) + "\n")
    (root / "config.yaml").write_text(CONFIG)
    run_ingest(["--input", str(root / "train.tsv"), "--config", str(root / "config.yaml"), "--output",
                str(root / "train"), "--no_report", "--progress_seconds", "0"])
    return root


def _heldout(root, source_dir, out, *extra):
    return run_ingest(["--input", str(root / "heldout.tsv"), "--config", str(root / "config.yaml"), "--output",
                       str(out), "--no_report", "--progress_seconds", "0", "--vocab_from", str(source_dir), *extra])


def _copy(root, tmp_path):
    copy = tmp_path / "train"
    shutil.copytree(root / "train", copy)
    return copy


def _fingerprint(data: bytes, num_oov: int) -> str:
    # sparse_io.id_space's layout, spelled out again: sha256 of the settings' JSON, a NUL, the file's bytes.
    head = json.dumps({"kind": "vocabulary", "num_oov_buckets": num_oov}, sort_keys=True).encode()
    return "vocabulary:sha256:" + hashlib.sha256(head + b"\0" + data).hexdigest()[:32]


def test_the_held_out_output_fingerprints_the_vocabulary_bytes_it_copied(source, tmp_path):
    out = tmp_path / "heldout"
    _heldout(source, source / "train", out)
    copied = (out / "vocab" / "C9.txt").read_bytes()
    assert copied == (source / "train" / "vocab" / "C9.txt").read_bytes()
    spec = Schema.load(str(out))["C9"]
    assert spec.id_space == _fingerprint(copied, 2)
    assert spec.vocabulary_size == len(copied.decode().splitlines()) + 2


def test_a_source_without_a_manifest_is_refused(source, tmp_path):
    copy = _copy(source, tmp_path)
    os.remove(copy / MANIFEST_FILE)
    with pytest.raises(UsageError, match=r"--vocab_from .*no _MANIFEST.json"):
        _heldout(source, copy, tmp_path / "heldout")
    assert not (tmp_path / "heldout" / MANIFEST_FILE).exists()


def _swap_two_lines(path):
    lines = path.read_bytes().split(b"\n")
    assert len(lines) > 3
    lines[0], lines[1] = lines[1], lines[0]
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("edit", ["swap", "prepend"])
def test_an_edited_vocabulary_is_refused_with_exit_2_and_one_line_naming_it(source, tmp_path, capsys, edit):
    copy = _copy(source, tmp_path)
    vocab = copy / "vocab" / "C9.txt"
    if edit == "swap":  # same size: only the checksum tells
        _swap_two_lines(vocab)
    else:
        vocab.write_bytes(b"".join(b"extra%d\n" % i for i in range(100)) + vocab.read_bytes())
    out = tmp_path / "heldout"
    with pytest.raises(SystemExit) as info:
        main(["--input", str(source / "heldout.tsv"), "--config", str(source / "config.yaml"), "--output", str(out),
              "--no_report", "--vocab_from", str(copy)])
    assert info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pipelines.ingest:")]
    assert len(errors) == 1 and "--vocab_from" in errors[0] and "vocab/C9.txt" in errors[0], errors
    assert not (out / MANIFEST_FILE).exists()


def test_an_edited_schema_json_is_refused_naming_it(source, tmp_path):
    copy = _copy(source, tmp_path)
    text = (copy / "schema.json").read_text()
    edited = text.replace('"hash_buckets": 1000', '"hash_buckets": 1001', 1)
    assert edited != text and len(edited) == len(text)
    (copy / "schema.json").write_text(edited)
    with pytest.raises(UsageError, match=r"--vocab_from .*schema.json"):
        _heldout(source, copy, tmp_path / "heldout")


def test_a_recommitted_vocabulary_that_is_not_the_one_schema_json_fingerprinted_is_refused(source, tmp_path):
    copy = _copy(source, tmp_path)
    _swap_two_lines(copy / "vocab" / "C9.txt")
    os.remove(copy / MANIFEST_FILE)
    commit_directory(str(copy))  # the manifest now agrees with the edited file; schema.json's id space does not
    with pytest.raises(UsageError, match=r"--vocab_from .*vocab/C9.txt.*id space"):
        _heldout(source, copy, tmp_path / "heldout")


def test_a_vocabulary_that_changes_after_the_launch_checked_it_is_refused_by_the_copy(source, tmp_path):
    from pipelines.config import load_config
    from pipelines.id_spaces import _CopyVocabularyFn, adopt_id_spaces
    from sparse_io.errors import CorruptFileError

    copy = _copy(source, tmp_path)
    config = load_config(str(source / "config.yaml"))
    _, reused = adopt_id_spaces(config, str(copy))
    _swap_two_lines(copy / "vocab" / "C9.txt")
    (tmp_path / "out" / "vocab").mkdir(parents=True)
    with pytest.raises(CorruptFileError, match="C9.txt"):
        list(_CopyVocabularyFn(str(tmp_path / "out" / "vocab")).process([reused["C9"]]))
    assert not (tmp_path / "out" / "vocab" / "C9.txt").exists()
