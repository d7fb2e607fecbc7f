"""Every command and code block of the README and of docs/*.md runs, so the documentation cannot drift from the code."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)
# The guides in the order a reader follows them from the README: a guide's blocks may use what an earlier one
# made (the serving example scores the model "Your own logs" trained). Every docs/*.md is listed here.
DOCS = ["your_logs.md", "validation.md", "tasks.md", "serving.md", "training_input.md", "tfdata_service.md",
        "dataflow.md", "histories.md", "guarantees.md", "native_kernels.md", "gpu.md", "benchmarks.md",
        "troubleshooting.md"]
# Pages whose blocks their own tests run: feature_transforms.md (tests/test_docs_feature_transforms.py,
# tests/test_docs_join.py, tests/test_docs_derived*.py), config.md (generated; tests/test_config_reference.py).
OWN_TESTS = ["feature_transforms.md", "config.md"]


def _doc(name: str) -> str:
    return (REPO / "docs" / name).read_text(encoding="utf-8")


# Every tagged block a reader meets: the README's, then each guide's; untagged blocks (configs, diagrams) are
# checked by the tests of their section.
WALKED = [("README.md", *block) for block in BLOCKS] + [
    (f"docs/{name}", *block) for name in DOCS for block in re.findall(r"```(\w+)\n(.*?)```", _doc(name), flags=re.S)]


def _commands(language: str) -> list[str]:
    commands = []
    for lang, body in BLOCKS:
        if lang == language:
            joined = body.replace("\\\n", " ")
            commands += [line.split("#")[0].strip() for line in joined.splitlines() if line.split("#")[0].strip()]
    return commands


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")


def test_the_readme_shows_exactly_the_two_commands_a_fresh_clone_needs():
    make = [c for c in _commands("bash") if c.startswith("make ")]
    assert make == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


def test_make_test_is_the_suite_and_make_demo_runs_the_demo():
    # `make test` cannot run inside the suite it starts; its recipe is checked instead.
    plan = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0 and "-m pytest" in plan.stdout and "ruff check" in plan.stdout


# A new user's walk through the README and then the guides (DOCS): every block in the order a reader meets it, run
# as written from a directory that looks like the repository root (pipelines/ and docs/ linked in, so the relative
# config paths resolve) in a new user's environment (no TF_CPP_MIN_LOG_LEVEL, no CUDA_VISIBLE_DEVICES).
# Three commands are stood in for, each for a stated reason:
#   make demo  -> `make demo` itself from the repository, its ARGS asking for a small synthetic log and few steps
#                 written where the reader stands (the full demo takes minutes);
#   make test  -> not run (it is this suite; test_make_test_is_the_suite_and_make_demo_runs_the_demo checks it);
#   Dataflow   -> with --validate_only (submitting needs cloud credentials; this builds and serialises the graph).
# The guides' click logs are the samples shipped in docs/sample_logs/ (in the layout own_logs.yaml describes; see
# test_the_shipped_sample_logs_are_the_walks_click_logs); the pytest example (a python block with `def test_`)
# runs under pytest in test_the_pytest_examples_pass_offline_on_the_direct_runner_without_prism.
# The shell expands $PWD (the reader's directory) before make sees ARGS; make would read `$P` as its own variable.
SMALL_DEMO = (f"make -C {shlex.quote(str(REPO))} demo ARGS=\"--rows 1500 --eval_rows 500 --steps 10 --batch_size 128"
              ' --output $PWD/demo_output"')


def _block_commands(body: str) -> list[str]:
    joined = body.replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in joined.splitlines() if line.split("#")[0].strip()]


def _reader_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # `python` is the project's
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(command: str, cwd: pathlib.Path) -> dict:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, env=_reader_env(),
                          timeout=600)
    return {"command": command, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _write_click_log(path: pathlib.Path, rows: int) -> None:
    """A tab-separated click log with a header, in the layout pipelines/configs/own_logs.yaml reads."""
    lines = ["clicked\tuser_id\titem_id\ttags\tprice\tevent_time"]
    for i in range(rows):
        tags = ("shoes|sale", "NA", "", "hats")[i % 4]
        when = f"2024-03-01T09:{i // 60 % 60:02d}:{i % 60:02d}.120Z" if i % 2 else str(1709284502120 + 1000 * i)
        lines.append(f"{(i * 7) % 3 % 2}\tu{i % 50}\ti{i % 37}\t{tags}\t{'NULL' if i % 5 == 0 else i % 20}\t{when}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    home = tmp_path_factory.mktemp("reader")
    (home / "pipelines").symlink_to(REPO / "pipelines")
    (home / "docs").symlink_to(REPO / "docs")  # the sample logs the guides read
    steps = []
    for page, lang, body in WALKED:
        if lang == "python" and "def test_" in body:
            continue
        if lang in ("python", "py"):
            (home / "snippet.py").write_text(body)
            steps.append({**_run("python snippet.py", home), "block": lang, "page": page})
            continue
        for command in _block_commands(body):
            if command == "make test":
                continue
            if command == "make demo":
                command = SMALL_DEMO
            elif "DataflowRunner" in command:
                command += " --validate_only"
            steps.append({**_run(command, home), "block": lang, "page": page})
            if steps[-1]["returncode"]:
                return home, steps  # a reader stops at the first failing step
    return home, steps


def test_a_reader_following_the_readme_succeeds_at_every_step(walk):
    home, steps = walk
    failed = [(s["command"], s["stderr"][-2000:]) for s in steps if s["returncode"] != 0]
    assert not failed, failed
    commands = [s["command"] for s in steps]
    assert commands[0] == SMALL_DEMO
    ingests = [c for c in commands if c.startswith("python -m pipelines.ingest --input demo_output/raw/")]
    assert len(ingests) == 2 and commands.index(ingests[0]) == 1 and "--vocab_from out/train" in ingests[1]
    (train,) = [s for s in steps if s["command"].startswith("python -m pipelines.train --data out/train ")]
    (snippet,) = [s for s in steps if s["block"] == "python" and s["page"] == "README.md"]
    (dataflow,) = [s for s in steps if "DataflowRunner" in s["command"]]
    # The order a reader meets them: demo, ingests, train, the snippet reading out/train, Dataflow.
    assert commands.index(train["command"]) < commands.index(snippet["command"]) < commands.index(dataflow["command"])
    assert "sparseflow demo done" in steps[0]["stdout"] and "always predicted" in steps[0]["stdout"]
    for name in ("train", "heldout"):
        assert (home / "out" / name / "schema.json").exists() and (home / "out" / name / "report.html").exists()
    spaces = [{f["name"]: f.get("id_space") for f in json.loads((home / "out" / name / "schema.json").read_text())[
        "features"] if f["kind"] == "sparse"} for name in ("train", "heldout")]
    assert spaces[0] == spaces[1] and all(spaces[0].values())  # one id space: --vocab_from
    assert (home / "out" / "clicks-model" / "export").is_dir()
    trained = json.loads(train["stdout"][train["stdout"].index("{"):])
    assert trained["steps"] >= 1 and 0 < trained["eval_auc"] <= 1
    assert (home / "out" / "model" / "export" / "saved_model.pb").exists()
    assert snippet["stdout"].strip().splitlines()[-1].endswith("(256, 16) (256, 64) True")
    assert "pipeline valid for DataflowRunner" in dataflow["stdout"]
    assert not [s["command"] for s in steps if re.search(r"\bnan\b", s["stdout"], re.I)]


def test_the_readme_arrow_cache_holds_the_training_rows(walk):
    home, steps = walk
    (convert,) = [s for s in steps if s["command"].startswith("python -m pipelines.convert out/train ")]
    assert convert["returncode"] == 0 and "(arrow)" in convert["stdout"]
    cache, train = home / "out" / "train_arrow", home / "out" / "train"
    arrow = sorted(p.name for p in cache.iterdir() if p.name.startswith("part-"))
    parquet = sorted(p.name for p in train.iterdir() if p.name.startswith("part-"))
    assert arrow and [n.replace(".arrow", ".parquet") for n in arrow] == parquet
    manifests = [json.loads((d / "_MANIFEST.json").read_text()) for d in (train, cache)]
    assert [e["rows"] for e in manifests[0]["shards"]] == [e["rows"] for e in manifests[1]["shards"]]
    assert (cache / "schema.json").read_bytes() == (train / "schema.json").read_bytes()


def _snippet() -> str:
    (code,) = [body for lang, body in BLOCKS if lang == "python" and "def test_" not in body]
    return code


def test_the_snippet_is_short_and_reads_its_table_size_from_schema_json():
    code = _snippet()
    assert len(code.strip().splitlines()) <= 22
    assert "table_rows(" in code and "20000" not in code and "1000000" not in code


def _snippet_with(batch: int, data: str = "out/train") -> str:
    code = _snippet()
    assert code.count("BATCH = 256") == 1 and code.count('"out/train"') == 2
    return code.replace("BATCH = 256", f"BATCH = {batch}").replace('"out/train"', f'"{data}"')


def test_the_snippet_works_for_any_batch_size_up_to_the_rows(walk):
    home, _ = walk
    rows = json.loads((home / "out" / "train" / "stats.json").read_text())["num_rows"]
    for batch in (1, rows):
        (home / f"snippet_{batch}.py").write_text(_snippet_with(batch))
        done = _run(f"python snippet_{batch}.py", home)
        assert done["returncode"] == 0, done["stderr"][-2000:]
        assert done["stdout"].strip().splitlines()[-1].endswith(f"({batch}, 16) ({batch}, 64) True")


def test_the_snippet_sizes_its_table_from_the_full_size_criteo_config_too(walk):
    # criteo.yaml hashes into a million buckets and looks C9 up in a vocabulary: a 20,000-row table would fail.
    home, _ = walk
    ingest = _run("python -m pipelines.ingest --input demo_output/raw/train.tsv.gz "
                  "--config pipelines/configs/criteo.yaml --output out/criteo", home)
    assert ingest["returncode"] == 0, ingest["stderr"][-2000:]
    (home / "snippet_criteo.py").write_text(_snippet_with(256, "out/criteo"))
    done = _run("python snippet_criteo.py", home)
    assert done["returncode"] == 0, done["stderr"][-2000:]
    assert done["stdout"].strip().splitlines()[-1].endswith("(256, 16) (256, 64) True")


# TensorFlow's C++ (glog/absl) lines, its Python loggers, and CUDA probing on a machine without a GPU.
_TF_LOG_LINE = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:[\d.]+\s+\d+ [\w.]+:\d+\]"
    r"|^WARNING: All log messages before absl::InitializeLog"
    r"|\b(?:INFO|WARNING|ERROR)[: ](?:absl|tensorflow|h5py)[:.]"
    r"|\b(?:INFO|WARNING|ERROR) (?:absl|tensorflow): "
    r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] (?:tensorflow|external)/"
    r"|cuInit|oneDNN custom operations|Unable to register cu(?:DNN|FFT|BLAS)"
)


def test_no_tensorflow_log_lines_reach_a_new_users_stderr(walk):
    _, steps = walk
    # Our programs, not the snippet: a script of the reader's own that imports TensorFlow gets TensorFlow's lines.
    programs = [s for s in steps if s["command"].startswith("python -m ")]
    assert len(programs) >= 6
    noisy = {s["command"]: [line for line in s["stderr"].splitlines() if _TF_LOG_LINE.search(line)] for s in programs}
    noisy = {command: lines[:3] for command, lines in noisy.items() if lines}
    assert not noisy, noisy


# Run beside the README's pytest examples: Prism and the network are refused and every attempt is
# recorded with the test that made it.
_GUARD_CONFTEST = """
import os, socket
from apache_beam.runners.portability import prism_runner

def _record(what):
    with open(os.environ["ATTEMPTS_FILE"], "a") as f:
        f.write(os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0] + " " + what + "\\n")

def _refuse_prism(self, *args, **kwargs):
    _record("prism")
    raise RuntimeError("Prism refused in this test")

def _refuse_download(url, *args, **kwargs):
    _record("download " + str(url))
    raise RuntimeError("no network in this test")

prism_runner.PrismRunner.run_pipeline = _refuse_prism
prism_runner.PrismJobServer._download_to_local_path = staticmethod(_refuse_download)
_getaddrinfo = socket.getaddrinfo

def _local_only(host, *args, **kwargs):
    if host not in ("localhost", "127.0.0.1", "::1", None):
        _record("network " + str(host))
        raise OSError("no network in this test: " + str(host))
    return _getaddrinfo(host, *args, **kwargs)

socket.getaddrinfo = _local_only
"""

# Shows that the guard sees an attempt: Beam's plain DirectRunner tries Prism first.
_GUARD_CONTROL = """
import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

def test_plain_direct_runner_control():
    with TestPipeline(runner="DirectRunner") as p:
        _ = p | beam.Create([1])
"""


def test_the_pytest_examples_pass_offline_on_the_direct_runner_without_prism(tmp_path):
    examples = [body for _, lang, body in WALKED if lang == "python" and "def test_" in body]
    assert examples, "the README has no pytest example"
    for i, body in enumerate(examples):
        (tmp_path / f"test_readme_example_{i}.py").write_text(body)
    (tmp_path / "conftest.py").write_text(_GUARD_CONFTEST)
    (tmp_path / "test_guard_control.py").write_text(_GUARD_CONTROL)
    attempts = tmp_path / "attempts.txt"
    attempts.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, env=dict(_env(), ATTEMPTS_FILE=str(attempts)), timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"{len(examples) + 1} passed" in done.stdout, done.stdout[-2000:]
    seen = attempts.read_text().splitlines()
    assert [line for line in seen if "test_readme_example" in line] == []
    assert any(line.startswith("test_guard_control.py") and line.endswith(" prism") for line in seen), seen


def test_the_benchmark_rows_in_the_docs_are_those_of_results_md():
    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    section = _doc("benchmarks.md").split("## How it compares", 1)[0]  # the comparison table is prose, not rows
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert len(rows) > 10
    missing = [row for row in rows if row not in results]
    assert not missing, missing


def _tasks_section() -> str:
    return _doc("tasks.md")


def test_the_tasks_commands_resume_exclude_and_print_baselines(walk):
    home, steps = walk
    (body,) = re.findall(r"```bash\n(.*?)```", _tasks_section(), flags=re.S)
    commands = _block_commands(body)
    assert len(commands) == 2 and "--resume" in commands[0] and "--exclude tags,price" in commands[1]
    ran = {s["command"]: s for s in steps}
    for command in commands:
        assert ran[command]["returncode"] == 0, ran[command]["stderr"][-2000:]
        assert "always predicting the training base rate" in ran[command]["stderr"]
    runs = json.loads((home / "out" / "clicks-model" / "train_result.json").read_text())["runs"]
    assert [r["started"] for r in runs] == ["fresh", "resumed"] and runs[-1]["steps"] == 40
    excluded = json.loads((home / "out" / "clicks-no-tags" / "train_result.json").read_text())["runs"]
    assert excluded[-1]["excluded"] == ["tags", "price"]


def test_the_tasks_guide_quotes_the_refusal_of_a_task_that_does_not_fit_the_label():
    from pipelines.tasks import TaskError, resolve_task
    from sparse_io.schema import FeatureSpec, Schema

    quoted = re.search(r"says\s+`([^`]+)`", _tasks_section()).group(1)
    schema = Schema([FeatureSpec("rating", "label", "int64", label_type="integer"), FeatureSpec("user", "sparse")])
    stats = {"min": 1, "max": 5, "value_counts": [[v, 10] for v in range(1, 6)]}
    with pytest.raises(TaskError) as refusal:
        resolve_task(schema, "ctr", stats)
    assert quoted in str(refusal.value)


def test_every_guide_is_walked_once():
    assert sorted(DOCS + OWN_TESTS) == sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert len(set(DOCS)) == len(DOCS)


def test_the_shipped_sample_logs_are_the_walks_click_logs(tmp_path):
    # The other documentation tests write these logs themselves; the walk reads the shipped copies.
    for name, rows in (("clicks-1.tsv", 600), ("heldout-1.tsv", 200)):
        _write_click_log(tmp_path / name, rows)
        assert (REPO / "docs" / "sample_logs" / name).read_bytes() == (tmp_path / name).read_bytes(), name
