"""Atomic writes: complete files only, no link replaced, and nothing written through a link out of the output root."""

import os

import pytest
from _batches import SCHEMA, to_batch

from sparse_io import DeadLetter, DeadLetterSink, write_parquet_shard, write_tfrecord_shard
from sparse_io.atomic import atomic_output, atomic_write_text, check_inside_root, remove_stale_temporaries


@pytest.fixture
def tree(tmp_path):
    """out/ (the output root), outside/ (a directory it must never write into), and links between them."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "inner").mkdir()
    os.symlink(outside, out / "escape")  # a linked subdirectory leading out
    os.symlink(out / "inner", out / "alias")  # a link that stays inside
    os.symlink(tmp_path / "nowhere", out / "dangling")  # leads out, to nothing yet
    return out, outside


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def _write_bytes(path, root):
    with atomic_output(str(path), output_root=str(root)) as f:
        f.write(b"data")


def test_a_file_appears_only_when_complete_and_a_failure_leaves_nothing(tmp_path):
    path = tmp_path / "a.bin"
    with pytest.raises(RuntimeError):
        with atomic_output(str(path)) as f:
            f.write(b"half")
            assert _listing(tmp_path)[0].startswith(".tmp-")
            raise RuntimeError("crash")
    assert _listing(tmp_path) == []
    atomic_write_text(str(path), "whole")
    assert path.read_text() == "whole" and _listing(tmp_path) == ["a.bin"]


def test_a_link_at_the_final_path_is_never_replaced(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    os.symlink(target, tmp_path / "link")
    with pytest.raises(PermissionError, match="refusing to replace symbolic link"):
        atomic_write_text(str(tmp_path / "link"), "overwrite")
    assert target.read_text() == "keep" and os.path.islink(tmp_path / "link")


@pytest.mark.parametrize("where", ["escape/a.bin", "escape/new/deeper/a.bin", "dangling/a.bin", "../outside/a.bin"])
def test_a_path_leading_out_of_the_output_root_is_refused_before_anything_is_made(tree, where):
    out, outside = tree
    before = _listing(out)
    with pytest.raises(PermissionError, match="refusing to write .* output directory"):
        _write_bytes(os.path.join(str(out), where), out)
    assert _listing(outside) == [] and _listing(out) == before
    assert not os.path.exists(out.parent / "nowhere")


@pytest.mark.parametrize("where", ["a.bin", "inner/a.bin", "alias/a.bin", "new/deeper/a.bin"])
def test_paths_inside_the_root_are_written_even_through_links_that_stay_inside(tree, where):
    out, outside = tree
    _write_bytes(os.path.join(str(out), where), out)
    assert os.path.realpath(os.path.join(str(out), where)).startswith(os.path.realpath(str(out)))
    assert (out / where).read_bytes() == b"data" and _listing(outside) == []


def test_the_root_itself_may_be_a_link_and_may_not_exist_yet(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "chosen")
    _write_bytes(tmp_path / "chosen" / "a.bin", tmp_path / "chosen")
    assert (real / "a.bin").read_bytes() == b"data"
    _write_bytes(tmp_path / "fresh" / "sub" / "a.bin", tmp_path / "fresh")
    assert (tmp_path / "fresh" / "sub" / "a.bin").exists()


def test_the_root_is_no_file_name(tmp_path):
    with pytest.raises(PermissionError, match="outside the output directory"):
        check_inside_root(str(tmp_path), str(tmp_path))


def _parquet(path, root):
    write_parquet_shard(path, [to_batch([{"label": 1}])], SCHEMA, output_root=root)


def _tfrecord(path, root):
    write_tfrecord_shard(path, [to_batch([{"label": 1}])], SCHEMA, output_root=root)


def _schema(path, root):
    SCHEMA.save(os.path.dirname(path), output_root=root)


def _dead_letters(path, root):
    sink = DeadLetterSink()
    sink.add(DeadLetter("x.tsv", 1, "bad", "raw"))
    sink.write_jsonl(path, output_root=root)


def _text(path, root):
    atomic_write_text(path, "{}", output_root=root)


@pytest.mark.parametrize("writer", [_parquet, _tfrecord, _schema, _dead_letters, _text])
def test_every_sparse_io_writer_takes_the_output_root(tree, writer):
    out, outside = tree
    with pytest.raises(PermissionError, match="symbolic link leads out"):
        writer(os.path.join(str(out), "escape", "schema.json"), str(out))
    assert _listing(outside) == []
    writer(os.path.join(str(out), "inner", "schema.json"), str(out))
    assert _listing(out / "inner") == ["schema.json"]


def test_stale_temporaries_are_removed(tmp_path):
    (tmp_path / ".tmp-abc-part-00000.parquet").write_bytes(b"partial")
    (tmp_path / "part-00000.parquet").write_bytes(b"whole")
    assert remove_stale_temporaries(str(tmp_path)) == 1
    assert _listing(tmp_path) == ["part-00000.parquet"]
