"""One spelling of each flag across the programs, and an unknown flag named first, with a suggestion."""

import pathlib
import re

import pytest

from pipelines import cli, convert, ingest, train, verify

REPO = pathlib.Path(__file__).resolve().parents[1]


def _exit_and_stderr(main, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


def test_an_unknown_flag_is_named_before_missing_required_ones(capsys):
    code, err = _exit_and_stderr(train.main, ["--bogus"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == "pipelines.train: error: unrecognized argument: --bogus"


@pytest.mark.parametrize(("main", "program", "argv", "flag", "suggestion"), [
    (train.main, "pipelines.train", ["--data", "d", "--model_dir", "m", "--eval-data", "e"], "--eval-data",
     "--eval_data"),
    (train.main, "pipelines.train", ["--data", "d", "--model_dir", "m", "--batchsize", "8"], "--batchsize",
     "--batch_size"),
    (verify.main, "pipelines.verify", ["d", "--verfy", "sizes"], "--verfy", "--verify"),
    (ingest.main, "pipelines.ingest", ["--input", "x.tsv", "--outptu", "o"], "--outptu", "--output"),
])
def test_a_misspelt_flag_gets_a_did_you_mean(main, program, argv, flag, suggestion, capsys):
    code, err = _exit_and_stderr(main, argv, capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"{program}: error: unrecognized argument: {flag} (did you mean {suggestion}?)")


def test_every_program_that_reads_shards_takes_verify_with_the_same_levels():
    for parser in (train._parser(), convert._parser(), verify._parser()):
        (action,) = [a for a in parser._actions if "--verify" in a.option_strings]
        assert {"sizes", "checksums"} <= set(action.choices), parser.prog


def test_verify_keeps_level_as_an_unlisted_alias():
    parser = verify._parser()
    assert parser.parse_args(["d", "--level", "sizes"]).verify == "sizes"
    assert parser.parse_args(["d"]).verify == "checksums"
    assert "--level" not in parser.format_help()


def test_one_spelling_of_unrecognized_in_the_programs():
    sources = [p for p in (REPO / "pipelines").rglob("*.py")]
    assert not [p.name for p in sources if re.search(r"unrecognis", p.read_text(encoding="utf-8"))]


def test_the_suggestion_is_for_close_flags_only():
    assert cli.suggest_flag("--eval-data", ["--eval_data"]) == " (did you mean --eval_data?)"
    assert cli.suggest_flag("--xyz", ["--eval_data", "--data"]) == ""
    assert cli.unrecognized_flags_message(["--a=1", "--b"], []) == "unrecognized arguments: --a, --b"


def test_the_docstring_examples_run():
    import doctest

    assert doctest.testmod(cli).failed == 0
