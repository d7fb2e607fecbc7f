"""Every command-line program explains itself: --help lists its flags with defaults and meanings, a bad flag
gives the short usage and one error line, and the exit status means the same thing everywhere."""

import argparse
import os
import re
import subprocess
import sys

import pytest

import benchmarks.__main__ as bench_main
from pipelines import cli, demo, ingest, train, validate, verify
from sparse_io.errors import CorruptFileError
from transforms.tfdata.core.files import NoInputFilesError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# program -> (main, its parser). The parsers are the programs' own, so a flag added later is checked too.
PROGRAMS = {
    "pipelines.ingest": (ingest.main, ingest.ingest_parser),
    "pipelines.train": (train.main, train._parser),
    "pipelines.demo": (demo.main, None),
    "pipelines.verify": (verify.main, verify._parser),
    "pipelines.validate": (validate.main, validate._parser),
    "benchmarks": (bench_main.main, None),
}


def _help(capsys, main) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


def _entries(text: str) -> dict[str, str]:
    """The help's option entries: first flag -> its meaning (wrapped lines joined)."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries, current = {}, None
    for line in section.splitlines():
        head = re.match(r"^  (-[^ ,]+)(?:[^ ]*| \S+)*?(?:, (--\S+)(?: \S+)?)?(?:\s{2,}(.*))?$", line)
        if line.startswith("  -") and head:
            current = head.group(2) or head.group(1)
            entries[current] = head.group(3) or ""
        elif current is not None:
            entries[current] = (entries[current] + " " + line.strip()).strip()
    return entries


def _flags(text: str) -> set[str]:
    return set(re.findall(r"^\s+(?:-\w, )?(--\w+)", text, flags=re.M))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_help_lists_flags_with_meanings_defaults_verbosity_and_exit_status(program, capsys):
    main, _ = PROGRAMS[program]
    text = _help(capsys, main)
    assert text.startswith(f"usage: python -m {program} ")
    assert {"--help", "--verbose"} <= _flags(text)
    assert "exit status:" in text
    for code, meaning in (("0", "success"), ("2", "usage, config or data error"), ("1", "internal error")):
        assert re.search(rf"^\s+{code}\s+.*{meaning}", text, flags=re.M), (code, text)
    entries = _entries(text)
    assert "--verbose" in entries and len(entries) >= 4
    for flag, meaning in entries.items():
        words = re.sub(r"\(default: [^)]*\)", "", meaning).split()
        assert len(words) >= 2, f"{program} {flag} has no one-line meaning: {meaning!r}"


@pytest.mark.parametrize("program, parser", [(p, f) for p, (_, f) in PROGRAMS.items() if f is not None])
def test_help_shows_the_default_of_every_flag_that_has_one(program, parser, capsys):
    text = " ".join(_help(capsys, PROGRAMS[program][0]).split())
    for action in parser()._actions:
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or isinstance(action, argparse._CountAction):
            continue
        assert f"(default: {default})" in text, (action.option_strings, default)


def test_train_help_gives_the_defaults_of_batch_size_learning_rate_and_steps(capsys):
    text = " ".join(_help(capsys, train.main).split())
    assert "rows per training step (default: 1024)" in text
    assert "Adam's learning rate (default: 0.002)" in text
    assert "--steps STEPS train this many steps in all (default: --epochs)" in text


def test_ingest_help_says_how_beam_options_pass_through_and_help_beam_lists_them(capsys):
    text = _help(capsys, ingest.main)
    assert "--help_beam" in _flags(text)
    assert "Beam pipeline options (--runner, --project" in text and "pass through to Beam untouched" in text
    for flag in ("--input", "--output", "--format", "--config", "--overwrite", "--validate_only"):
        assert flag in _flags(text)
    assert "--temp_location" not in _flags(text)  # Beam's flags are listed by --help_beam, not here
    with pytest.raises(SystemExit) as exit_info:
        ingest.main(["--help_beam"])
    assert exit_info.value.code == 0
    beam = capsys.readouterr().out
    assert {"--runner", "--temp_location", "--num_workers", "--setup_file"} <= _flags(beam)


def _run(*args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=REPO, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300)


def test_a_typo_in_a_flag_value_gives_the_short_usage_and_one_error_line():
    done = _run("pipelines.ingest", "--input", "x.tsv", "--format", "critio", "--output", "out")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith("usage: python -m pipelines.ingest --input PATTERN --output DIR")
    assert lines[1] == ("pipelines.ingest: error: argument --format: invalid choice: 'critio' "
                        "(choose from 'criteo', 'csv', 'tsv', 'jsonl', 'parquet')")
    assert done.stdout == ""


@pytest.mark.parametrize("flags, error", [
    (["--num_workers", "many"], "argument --num_workers: invalid int value: 'many'"),
    (["--frobnicate"], "unrecognized argument: --frobnicate"),
])
def test_a_bad_beam_flag_gives_our_usage_not_beams(flags, error, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        ingest.main(["--input", "x.tsv", "--output", str(tmp_path / "out"), *flags])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: python -m pipelines.ingest ")
    assert lines[1] == f"pipelines.ingest: error: {error}"


@pytest.mark.parametrize("main, argv, error", [
    (ingest.main, ["--output", "out"], "pipelines.ingest: error: --input is required (a file pattern, local or gs://)"),
    (train.main, ["--data", "d"], "pipelines.train: error: the following arguments are required: --model_dir"),
])
def test_a_missing_required_flag_gives_the_usage_and_one_error_line(main, argv, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: python -m pipelines.") and lines[1] == error


def test_beam_flags_reach_beam_exactly_as_given(tmp_path):
    log = tmp_path / "day.tsv"
    log.write_text("0\t1\n")
    summary = ingest.run_ingest([
        "--input", str(log), "--output", "gs://bucket/out", "--runner", "DataflowRunner", "--project", "my-project",
        "--region", "europe-west4", "--temp_location", "gs://bucket/tmp", "--num_workers", "3",
        "--experiments", "use_runner_v2", "--validate_only",
    ])
    assert summary["validated"] and summary["runner"] == "DataflowRunner"


@pytest.mark.parametrize("error, status", [
    (cli.UsageError("--input is required"), 2),
    (cli.DataError("--data holds 0 rows"), 2),
    (FileNotFoundError("no such file: x"), 2),
    (CorruptFileError("out/part-00000-of-00001.parquet", "truncated"), 2),
    (NoInputFilesError("no input files match 'out'"), 2),
    (RuntimeError("a bug"), 1),
    (ValueError("an unexpected value deep inside"), 1),
])
def test_exit_status_is_two_for_what_the_user_can_fix_and_one_for_internal_errors(error, status, capsys):
    with pytest.raises(SystemExit) as exit_info, cli.cli_errors("prog"):
        raise error
    assert exit_info.value.code == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prog: error: ")


def test_a_data_directory_without_shards_is_exit_status_two_like_a_missing_one(tmp_path, capsys):
    from tfdata_data import SCHEMA

    SCHEMA.replace("user", hash_buckets=1000).replace("items", hash_buckets=50).save(str(tmp_path / "no_shards"))
    for data in ("missing", "no_shards"):
        with pytest.raises(SystemExit) as exit_info:
            train.main(["--data", str(tmp_path / data), "--model_dir", str(tmp_path / "model"), "--steps", "1"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, err
        assert err.strip().splitlines()[-1].startswith("pipelines.train: error: ")


def test_the_readme_documents_the_exit_status_the_programs_use():
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = readme.split("## Command-line programs", 1)[1].split("\n## ", 1)[0]
    for program in PROGRAMS:
        assert f"python -m {program}" in section
    for code, meaning in (("0", "success"), ("2", "usage, config or data error"), ("1", "internal error")):
        assert re.search(rf"`{code}`[^\n]*{meaning}", section), code
    assert "--help_beam" in section and "-v" in section
