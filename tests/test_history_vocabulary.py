"""A vocabulary on a history's item: one id space for history entries and targets, counted over every event."""

import collections

from transforms.testing import ingest_in_memory

SCHEMA = [
    {"name": "user", "kind": "dense", "dtype": "string"},
    {"name": "item", "kind": "dense", "dtype": "string"},
    {"name": "ts", "kind": "dense", "dtype": "int64"},
]
# Every user's last item is one no history holds ("z..." items): only the targets see them.
TRAIN = [
    {"user": "u1", "item": "a", "ts": 1}, {"user": "u1", "item": "b", "ts": 2}, {"user": "u1", "item": "zq", "ts": 3},
    {"user": "u2", "item": "b", "ts": 1}, {"user": "u2", "item": "c", "ts": 5}, {"user": "u2", "item": "zr", "ts": 9},
    {"user": "u3", "item": "a", "ts": 4}, {"user": "u3", "item": "zq", "ts": 7},
]
HELDOUT = [
    {"user": "u4", "item": "b", "ts": 1}, {"user": "u4", "item": "new1", "ts": 2},
    {"user": "u4", "item": "zr", "ts": 3}, {"user": "u4", "item": "new2", "ts": 4},
]
NUM_OOV = 2


def _config(vocab_from=None):
    config = {
        "input": {"format": "jsonl", "schema": SCHEMA},
        "histories": {"key": "user", "item": "item", "time": "ts", "examples_per_event": True},
        "features": {"item": {"vocabulary": {"num_oov_buckets": NUM_OOV}}},
        "output": {"num_shards": 1, "shuffle": False},
        "stats": {"batch_sizes": [4]},
    }
    if vocab_from:
        config["vocab_from"] = vocab_from
    return config


def _expected_tokens(events):
    """Every event's item once, most frequent first, ties by value (ComputeVocabulary's order)."""
    counts = collections.Counter(e["item"] for e in events)
    return sorted(counts, key=lambda token: (-counts[token], token))


def _expected_examples(events, index):
    """(user, history ids, target id) per event with an earlier event, ids from `index`."""
    by_user = collections.defaultdict(list)
    for e in events:
        by_user[e["user"]].append((e["ts"], e["item"]))
    rows = []
    for user, clicks in by_user.items():
        for ts, item in sorted(clicks):
            history = [i for t, i in sorted(clicks) if t < ts]
            if history:
                rows.append((user, [index(i) for i in history], index(item)))
    return sorted(rows)


def _got(out):
    return sorted((r["user"], r["item"], r["target_item"]) for r in out.rows)


def test_the_vocabulary_holds_every_events_item_and_maps_targets_too(tmp_path):
    out = ingest_in_memory(TRAIN, _config(), output_dir=str(tmp_path / "train"))
    tokens = (tmp_path / "train" / "vocab" / "item.txt").read_text().split("\n")[:-1]
    assert tokens == _expected_tokens(TRAIN) == ["a", "b", "zq", "c", "zr"]
    ids = {token: NUM_OOV + i for i, token in enumerate(tokens)}
    assert _got(out) == _expected_examples(TRAIN, ids.__getitem__)
    item, target = out.schema["item"], out.schema["target_item"]
    assert item.vocabulary_size == target.vocabulary_size == NUM_OOV + 5
    assert target.id_space == item.id_space and item.id_space.startswith("vocabulary:")
    assert item.oov_ids == 0


def test_vocab_from_maps_history_entries_and_targets_and_counts_both_oov(tmp_path):
    ingest_in_memory(TRAIN, _config(), output_dir=str(tmp_path / "train"))
    out = ingest_in_memory(HELDOUT, _config(str(tmp_path / "train")), output_dir=str(tmp_path / "heldout"))
    tokens = _expected_tokens(TRAIN)
    assert (tmp_path / "heldout" / "vocab" / "item.txt").read_text().split("\n")[:-1] == tokens
    ids = {token: NUM_OOV + i for i, token in enumerate(tokens)}
    oov_seen = []

    def index(token):
        if token not in ids:
            oov_seen.append(token)
            return -1  # an OOV bucket: which one is the lookup's business, checked below
        return ids[token]

    expected = _expected_examples(HELDOUT, index)
    got = _got(out)
    assert [(u, len(h)) for u, h, _ in got] == [(u, len(h)) for u, h, _ in expected]
    for (_, history, target), (_, want_history, want_target) in zip(got, expected):
        assert [i if w >= 0 else -1 for i, w in zip(history, want_history)] == want_history
        assert all(0 <= i < NUM_OOV for i, w in zip(history, want_history) if w < 0)
        assert (target if want_target >= 0 else -1) == want_target and 0 <= target < NUM_OOV + len(tokens)
    # "new1" is the target of one example and in the histories of two; "new2" the target of one.
    assert sorted(oov_seen) == ["new1", "new1", "new1", "new2"]
    assert out.schema["item"].oov_ids == 4
    assert out.schema["target_item"].id_space == out.schema["item"].id_space
