"""The "Your own logs" guide's commands run verbatim on a tab-separated click log, with the shipped config."""

import csv
import datetime
import glob
import json
import os
import pathlib
import random
import re
import shlex
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
GUIDE = (REPO / "docs" / "your_logs.md").read_text(encoding="utf-8")
CONFIG = REPO / "pipelines" / "configs" / "own_logs.yaml"


def _section_commands() -> list[str]:
    (body,) = re.findall(r"```bash\n(.*?)```", GUIDE, flags=re.S)
    return [line.strip() for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def _write_log(path: pathlib.Path, rows: int, seed: int) -> list[dict]:
    """A click log as the config describes it, with null tokens, both time spellings, quotes and bad labels."""
    rng = random.Random(seed)
    header = ["event_time", "clicked", "user_id", "item_id", "tags", "price", "note"]
    records = []
    for i in range(rows):
        millis = 1709284502120 + 1000 * i
        iso = f"2024-03-01T{9 + i // 3600:02d}:{(15 + i // 60) % 60:02d}:{(2 + i) % 60:02d}.120Z"
        records.append({
            "event_time": str(millis) if i % 2 else iso,
            "clicked": "2" if i % 199 == 5 else str(rng.randint(0, 1)),
            "user_id": f"u{rng.randint(0, 50)}",
            "item_id": rng.choice(["i1", "i2", "NA", "i3"]),
            "tags": rng.choice(["shoes|sale", "NULL", "", "a\tb|c", "\\N"]),
            "price": rng.choice(["19.99", "NA", "", "3"]),
            "note": "free text, ignored",
        })
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, header, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return records


def test_the_readme_names_the_shipped_config_and_it_parses():
    from pipelines.config import load_config

    commands = _section_commands()
    assert len(commands) == 3 and all("pipelines/configs/own_logs.yaml" in c for c in commands[:2])
    assert "--vocab_from out/clicks" in commands[1] and "--eval_data out/clicks-heldout" in commands[2]
    config = load_config(str(CONFIG))
    assert config.read_options()["delimiter"] == "\t"
    assert config.read_options()["null_values"] == ("", "NA", "NULL", "\\N")
    assert config.schema["event_time"].time_unit == "ms"
    assert yaml.safe_load(CONFIG.read_text())["input"]["schema"][0]["kind"] == "label"


def test_the_readme_commands_ingest_and_train_on_a_click_log(tmp_path):
    logs = tmp_path / "docs" / "sample_logs"  # where the commands read the shipped sample: this test's log instead
    logs.mkdir(parents=True)
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the config relative to the repo
    records = _write_log(logs / "clicks-1.tsv", 600, seed=3)
    _write_log(logs / "heldout-1.tsv", 200, seed=4)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    for command in _section_commands():
        argv = shlex.split(command)
        assert argv[0] == "python"
        done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    out = tmp_path / "out" / "clicks"
    schema = {f["name"]: f for f in json.loads((out / "schema.json").read_text())["features"]}
    assert schema["event_time"]["time_unit"] == "ms" and schema["event_time"]["dtype"] == "int64"
    rows = [r for p in sorted(glob.glob(str(out / "part-*.parquet"))) for r in pq.read_table(p).to_pylist()]
    good = [r for r in records if r["clicked"] in ("0", "1")]
    assert len(rows) == len(good) == 600 - sum(i % 199 == 5 for i in range(600))
    letters = [json.loads(line) for line in (out / "errors" / "dead_letters.jsonl").read_text().splitlines()]
    assert len(letters) == 600 - len(good) and all("label 2 is not 0 or 1" in d["reason"] for d in letters)
    # Independent reference for the values: the millisecond times and the null tokens, from the text.
    def millis(text):
        if text.isdigit():
            return int(text)
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return int(when.timestamp()) * 1000 + when.microsecond // 1000

    assert sorted(r["event_time"] for r in rows) == sorted(millis(r["event_time"]) for r in good)
    assert sum(r["price"] is None for r in rows) == sum(r["price"] in ("", "NA") for r in good)
    assert sum(len(r["tags"]) == 0 for r in rows) == sum(r["tags"] in ("", "NULL", "\\N") for r in good)
    assert sum(len(r["item_id"]) == 0 for r in rows) == sum(r["item_id"] == "NA" for r in good)
    assert (tmp_path / "out" / "clicks-model" / "export").is_dir()
    trained = json.loads((tmp_path / "out" / "clicks-model" / "train_result.json").read_text())["runs"][-1]
    assert trained["eval_rows"] == 200 - sum(i % 199 == 5 for i in range(200))


@pytest.mark.parametrize("bad", ["2014-13-01T00:00:00Z"])
def test_a_bad_time_in_the_click_log_is_a_dead_letter(tmp_path, bad):
    from pipelines.config import load_config
    from sparse_io import DeadLetterSink, read_file

    config = load_config(str(CONFIG))
    path = tmp_path / "clicks.tsv"
    path.write_text("clicked\tuser_id\titem_id\ttags\tprice\tevent_time\n"
                    f"1\tu1\ti1\ta\t1\t{bad}\n0\tu1\ti1\ta\t1\t2024-03-01\n")
    sink = DeadLetterSink()
    rows = [r for b in read_file(str(path), "csv", config.schema, dead_letters=sink, **config.read_options())
            for r in b.to_pylist()]
    assert [r["event_time"] for r in rows] == [1709251200000] and sink.bad == 1
