"""What every sparseflow command-line program shares: help, flag errors, verbosity, exit status.

The programs (`pipelines.ingest`, `pipelines.train`, `pipelines.demo`,
`python -m benchmarks`, and any new one) build their flags on `parser()`:

    p = cli.parser("pipelines.train", __doc__, "--data DIR --model_dir DIR [options]")
    p.add_argument("--batch_size", type=int, default=1024, help="rows per training step")
    args = p.parse_args(argv)          # a bad flag: usage line + one error line, exit 2
    cli.configure_logging(args.verbose)  # before TensorFlow is imported

and run their body inside `cli_errors(program)`. That gives every program:

- `--help`: each flag with its one-line meaning and its default (added
  automatically: a new flag needs only a `help=` string), the exit status
  and the verbosity flag in the epilog; `beam=True` adds how Beam pipeline
  options pass through and `--help_beam`, which prints Beam's own list.
- A bad flag or flag value: the short usage line and one line
  `program: error: ...` on stderr, exit status 2 (`p.error(message)` for
  checks of values after parsing does the same).
- Quiet by default (`configure_logging`): no TensorFlow, absl, CUDA or Beam
  INFO lines; `-v` brings them back, `-vv` adds debug lines.
- Exit status (`EXIT_STATUS`): 0 success; 2 a usage, config or data error
  (`UsageError`, `DataError`, `ConfigError`, `SchemaError`, missing or
  unwritable paths), said in one line; 1 an internal error, said in one
  line (`SPARSEFLOW_DEBUG=1` shows its traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib
import logging
import os
import sys
from collections.abc import Iterator

from pipelines.errors import DataError, UsageError, cli_errors

__all__ = [
    "DETAIL_LOGGER",
    "EXIT_STATUS",
    "BeamFlagError",
    "DataError",
    "UsageError",
    "beam_help",
    "beam_parser",
    "cli_errors",
    "configure_logging",
    "parser",
    "suggest_flag",
    "unrecognized_flags_message",
    "quiet_tensorflow_import",
]

EXIT_STATUS = """\
exit status:
  0    success
  2    a usage, config or data error (bad flag, invalid config, missing input, data the program cannot use):
       one line on stderr says which
  1    an internal error: one line on stderr (SPARSEFLOW_DEBUG=1 shows the traceback)
  130  interrupted"""

VERBOSITY = """\
output: progress and results only; -v adds the TensorFlow, absl, CUDA and Beam log lines, -vv debug lines."""

BEAM_PASS_THROUGH = """\
Beam pipeline options (--runner, --project, --region, --temp_location, --staging_location, --setup_file,
--sdk_container_image, --num_workers, --max_num_workers, --machine_type, ...) pass through to Beam untouched;
--help_beam lists all of them. Without --runner the local in-process runner is used."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks; appends each flag's default to its help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or isinstance(action, (argparse._HelpAction, argparse._CountAction))
        ):
            return text
        return f"{text} (default: %(default)s)"


def suggest_flag(flag: str, known: list[str]) -> str:
    """" (did you mean --x?)" for the known flag closest to `flag`, or "" when none is close.

    A flag written with hyphens for underscores (or the reverse) is matched exactly first.

    Example:
      >>> suggest_flag("--eval-data", ["--eval_data", "--data"])
      ' (did you mean --eval_data?)'
      >>> suggest_flag("--bogus", ["--eval_data", "--data"])
      ''
    """
    name = flag.split("=", 1)[0]
    for candidate in (name.replace("-", "_"), "--" + name[2:].replace("_", "-")):
        if candidate in known and candidate != name:
            return f" (did you mean {candidate}?)"
    close = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def unrecognized_flags_message(flags: list[str], known: list[str]) -> str:
    """The one error line for flags no parser knows: each named, with a suggestion where one is close."""
    named = ", ".join(flag.split("=", 1)[0] + suggest_flag(flag, known) for flag in flags)
    return f"unrecognized argument{'s' if len(flags) > 1 else ''}: {named}"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that names an unknown flag before anything else, with a "did you mean".

    argparse reports missing required flags before unknown ones, so `train --bogus` used to say
    "the following arguments are required" and never mention `--bogus`.
    """

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        argv = sys.argv[1:] if args is None else list(args)
        unknown = self.unknown_flags(argv)
        if unknown:
            self.error(unrecognized_flags_message(unknown, list(self._option_string_actions)))
        return super().parse_args(argv, namespace)

    def unknown_flags(self, argv: list[str]) -> list[str]:
        """The tokens of `argv` that look like flags this parser does not define (up to a `--`)."""
        unknown = []
        for token in argv:
            if token == "--":
                break
            if (token.startswith("-") and token != "-" and not self._negative_number_matcher.match(token)
                    and token.split("=", 1)[0] not in self._option_string_actions):
                unknown.append(token)
        return unknown


class BeamFlagError(Exception):
    """A bad value of one of Beam's pipeline options (raised by `beam_parser()`'s parser)."""


class _BeamHelp(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(beam_help(parser.prog))
        parser.exit(0)


def parser(program: str, doc: str | None, synopsis: str, *, beam: bool = False,
           epilog: str | None = None) -> argparse.ArgumentParser:
    """An ArgumentParser for `python -m <program>` with the shared help, errors and `-v`.

    Args:
      program: the module users run, e.g. "pipelines.ingest"; the prefix of error lines.
      doc: the module docstring; its first paragraph is the help's description.
      synopsis: the arguments part of the usage line, e.g. "--data DIR --model_dir DIR [options]".
      beam: the program passes unknown flags to Beam: the help says so and gets `--help_beam`.
      epilog: more text for the end of the help, before the verbosity and exit status.

    Returns:
      The parser: on a bad flag, `parse_args` / `parse_known_args` / `error`
      print the usage line and one error line and exit with status 2.
    """
    description = (doc or "").strip().split("\n\n")[0]
    parts = [epilog] if epilog else []
    if beam:
        parts.append(BEAM_PASS_THROUGH)
    parts += [VERBOSITY, EXIT_STATUS]
    p = _Parser(
        prog=program,
        usage=f"python -m {program} {synopsis}" + (" [Beam pipeline options]" if beam else ""),
        description=description,
        epilog="\n\n".join(parts),
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="show library log lines (TensorFlow, absl, CUDA, Beam); -vv adds debug lines")
    if beam:
        p.add_argument("--help_beam", action=_BeamHelp, help="list Beam's own pipeline options and exit")
    return p


def beam_help(program: str) -> str:
    """Beam's help for every pipeline option it knows (runners, Dataflow, workers, ...)."""
    beam = beam_parser()
    beam.prog = f"python -m {program}"
    return beam.format_help()


class _ParserBuilt(Exception):
    pass


def beam_parser() -> argparse.ArgumentParser:
    """Beam's parser of every pipeline option, whose errors raise BeamFlagError.

    Beam's own parser prints its whole usage (over a hundred lines) on a bad
    value and exits. Beam builds it only inside `get_all_options`, which then
    parses and logs what it does not know; building it is all we take.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    parsers: list[argparse.ArgumentParser] = []

    def take(parser: argparse.ArgumentParser) -> None:
        parsers.append(parser)
        raise _ParserBuilt

    with contextlib.suppress(_ParserBuilt):
        PipelineOptions([]).get_all_options(add_extra_args_fn=take)
    parser = parsers[0]

    def error(message: str):
        if message.startswith("ambiguous option: "):  # as Beam's parser does: not an error there
            return
        raise BeamFlagError(message)

    parser.error = error
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of each record (a test's capture, a redirect)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _Formatter(logging.Formatter):
    """Progress lines (INFO) with a time only; warnings and errors, and every verbose line, say where from."""

    def __init__(self, verbose: bool):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._plain = None if verbose else logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        if self._plain is not None and record.levelno < logging.WARNING:
            return self._plain.format(record)
        return super().format(record)


# Python loggers of the libraries, and the level each gets at default verbosity.
_LIBRARY_LOGGERS = {"apache_beam": logging.WARNING, "tensorflow": logging.ERROR, "absl": logging.ERROR,
                    "keras": logging.ERROR, "h5py": logging.ERROR, "matplotlib": logging.WARNING,
                    "google.auth": logging.ERROR}


# Our lines a run needs only when asked: shown from -v on (where a training run resumed, each worker's input).
DETAIL_LOGGER = "sparseflow.detail"


def configure_logging(verbosity: int = 0) -> None:
    """Sets up logging for a program run at `verbosity` (the count of -v); call before TensorFlow loads.

    0: our INFO lines (`sparseflow.*` loggers) and every library's warnings
    and errors from Python, but no TensorFlow C++ lines (TF_CPP_MIN_LOG_LEVEL
    3, unless already set), no Beam INFO lines and no absl/TensorFlow Python
    INFO or WARNING lines, and no INFO lines of `DETAIL_LOGGER` (`sparseflow.detail.*`).
    1: everything at INFO, TensorFlow's C++ lines and our detail lines included. 2: DEBUG.
    """
    if verbosity <= 0:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    else:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    level = logging.DEBUG if verbosity >= 2 else logging.INFO
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)  # a second call (a program run twice in one process) replaces the first
    handler = _StderrHandler()
    handler.setFormatter(_Formatter(verbose=verbosity > 0))
    root.addHandler(handler)
    root.setLevel(logging.WARNING if verbosity <= 0 else level)
    logging.getLogger("sparseflow").setLevel(level)
    logging.getLogger(DETAIL_LOGGER).setLevel(logging.WARNING if verbosity <= 0 else level)
    _library_levels(verbosity)


def skip_collection_at_exit() -> None:
    """Lets the interpreter exit without collecting, one by one, every object alive now.

    For a program's main, once its work is done and every output is closed: a
    Beam run leaves ~190,000 objects (its modules, graph and runner), and the
    interpreter's final collection of them took ~0.45 s of a 10,000-row
    ingest's ~3 s (`benchmarks/vocabulary.py`); frozen (`gc.freeze`), they go
    with the process. Standard streams are still flushed and atexit handlers
    (logging's) still run. Not for a long-lived process: what is frozen is
    never collected there.
    """
    gc.freeze()


def _library_levels(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 2 else logging.INFO
    for name, quiet in _LIBRARY_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet if verbosity <= 0 else level)
    if "absl.logging" in sys.modules:  # absl keeps its own verbosity beside the Python logger's level
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR if verbosity <= 0 else absl.logging.INFO)


@contextlib.contextmanager
def _stderr_fd_silenced() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_tensorflow_import(verbosity: int = 0) -> None:
    """Imports TensorFlow now; at verbosity 0 without the lines its native libraries write while loading.

    TensorFlow's C++ libraries log (oneDNN, CUDA driver lookup, CPU features)
    straight to the stderr file descriptor before any log setting applies,
    whatever TF_CPP_MIN_LOG_LEVEL says; only silencing the descriptor for the
    import hides them. A failing import still raises its Python exception.
    """
    if "tensorflow" in sys.modules:
        return
    if verbosity > 0:
        importlib.import_module("tensorflow")
    else:
        with _stderr_fd_silenced():
            importlib.import_module("tensorflow")
    _library_levels(verbosity)  # absl arrived with TensorFlow

