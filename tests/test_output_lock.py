"""The output lock: one ingest per output, local (O_EXCL) and gs:// (a generation-0 precondition)."""

import json
import os
import socket
import subprocess

import pytest
from google.api_core.exceptions import NotFound, PreconditionFailed

from pipelines.errors import UsageError
from pipelines.output_lock import LOCK_FILE, acquire_output_lock


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_second_local_lock_is_refused_naming_the_holder_until_the_first_is_released(tmp_path):
    out = str(tmp_path / "out")
    lock = acquire_output_lock(out, ["part-00000-of-00001.parquet"])
    record = json.loads((tmp_path / "out" / LOCK_FILE).read_text())
    assert (record["host"], record["pid"], record["owns"]) == (
        socket.gethostname(), os.getpid(), ["part-00000-of-00001.parquet"]
    )
    with pytest.raises(UsageError, match=f"another ingest is writing to this output \\(pid {os.getpid()} on "):
        acquire_output_lock(out, [])
    lock.release()
    assert not os.path.exists(lock.path)
    with acquire_output_lock(out, []) as again:
        assert again.stale is None
    assert not os.path.exists(again.path)


def test_a_stale_local_lock_of_a_dead_process_is_taken_over_with_what_it_owned(tmp_path):
    stale = {"host": socket.gethostname(), "pid": _dead_pid(), "started": "t", "owns": ["schema.json"]}
    (tmp_path / LOCK_FILE).write_text(json.dumps(stale))
    with acquire_output_lock(str(tmp_path), ["stats.json"]) as lock:
        assert lock.stale == stale
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_lock_from_another_host_is_never_taken_as_stale(tmp_path):
    other = {"host": socket.gethostname() + "-elsewhere", "pid": _dead_pid(), "started": "t", "owns": []}
    (tmp_path / LOCK_FILE).write_text(json.dumps(other))
    with pytest.raises(UsageError, match="-elsewhere"):
        acquire_output_lock(str(tmp_path), [])
    assert json.loads((tmp_path / LOCK_FILE).read_text()) == other


class _FakeStore:
    """Objects by name with Cloud Storage's generation numbers and preconditions."""

    def __init__(self):
        self.objects = {}
        self.generations = 0

    def bucket(self, name):
        return _FakeBucket(self, name)


class _FakeBucket:
    def __init__(self, store, name):
        self.store, self.name = store, name

    def blob(self, name):
        return _FakeBlob(self.store, f"{self.name}/{name}")


class _FakeBlob:
    def __init__(self, store, key):
        self.store, self.key, self.generation = store, key, None

    def _current(self):
        return self.store.objects.get(self.key, (0, None))[0]

    def upload_from_string(self, data, content_type=None, if_generation_match=None):
        if if_generation_match is not None and self._current() != if_generation_match:
            raise PreconditionFailed("generation mismatch")
        self.store.generations += 1
        self.store.objects[self.key] = (self.store.generations, data.encode() if isinstance(data, str) else data)
        self.generation = self.store.generations

    def reload(self):
        if self.key not in self.store.objects:
            raise NotFound("no such object")
        self.generation = self._current()

    def download_as_bytes(self, if_generation_match=None):
        if self.key not in self.store.objects:
            raise NotFound("no such object")
        if if_generation_match is not None and self._current() != if_generation_match:
            raise PreconditionFailed("generation mismatch")
        return self.store.objects[self.key][1]

    def delete(self, if_generation_match=None):
        if self.key not in self.store.objects:
            raise NotFound("no such object")
        if if_generation_match is not None and self._current() != if_generation_match:
            raise PreconditionFailed("generation mismatch")
        del self.store.objects[self.key]


def test_a_gcs_lock_is_created_only_where_none_exists_and_released_only_by_its_holder():
    store = _FakeStore()
    key = f"bucket/criteo/shards/{LOCK_FILE}"
    lock = acquire_output_lock("gs://bucket/criteo/shards", ["schema.json"], gcs_client=store)
    assert lock.path == f"gs://{key}"
    assert json.loads(store.objects[key][1])["owns"] == ["schema.json"]
    with pytest.raises(UsageError, match="another ingest is writing to this output"):
        acquire_output_lock("gs://bucket/criteo/shards", [], gcs_client=store)
    # Someone removed the lock by hand and a new run took it: the first run's release leaves theirs alone.
    del store.objects[key]
    newer = acquire_output_lock("gs://bucket/criteo/shards/", [], gcs_client=store)
    lock.release()
    assert key in store.objects
    newer.release()
    assert key not in store.objects


def test_a_stale_gcs_lock_of_a_dead_process_on_this_host_is_taken_over():
    store = _FakeStore()
    stale = {"host": socket.gethostname(), "pid": _dead_pid(), "started": "t", "owns": ["part-00000-of-00001.parquet"]}
    store.generations = 7
    store.objects[f"bucket/out/{LOCK_FILE}"] = (7, json.dumps(stale).encode())
    with acquire_output_lock("gs://bucket/out", [], gcs_client=store) as lock:
        assert lock.stale == stale
        assert store.objects[f"bucket/out/{LOCK_FILE}"][0] == 8
