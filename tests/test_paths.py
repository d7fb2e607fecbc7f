"""join_under: a name joined under an output root never leaves it, local or gs://."""

import os

import pytest

from sparse_io.paths import check_feature_name, join_under


@pytest.mark.parametrize("root", ["out/vocab", "/tmp/out/vocab", "gs://bucket/out/vocab", "gs://bucket/out/vocab/"])
def test_a_plain_name_lands_directly_under_the_root(root):
    path = join_under(root, "C1.txt")
    assert path == root.rstrip("/") + "/C1.txt"
    assert os.path.basename(path) == "C1.txt"


@pytest.mark.parametrize("root", ["out/vocab", "gs://bucket/out/vocab"])
@pytest.mark.parametrize(
    "name", ["../../x.txt", "/abs/x.txt", "a/b.txt", "..", ".", "", "a\\b.txt", ".tmp-x", "x\0.txt"]
)
def test_a_name_that_could_leave_the_root_is_refused(root, name):
    with pytest.raises(ValueError, match="refusing") as info:
        join_under(root, name)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", ["C1", "user_id", "item.v2", "a-b", "X" * 200])
def test_feature_names_of_the_documented_characters_pass(name):
    check_feature_name(name)


@pytest.mark.parametrize("name", ["../../x", "/abs/x", ".hidden", "a b", "a/b", "é", "", "x\n", "X" * 201, 7])
def test_other_feature_names_are_refused_naming_the_feature(name):
    with pytest.raises(ValueError, match="feature name") as info:
        check_feature_name(name)
    assert repr(name) in str(info.value)
    assert "\n" not in str(info.value)
