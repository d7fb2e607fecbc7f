"""`WriteLineFile`: a PCollection of text lines into one file, written even when empty.

What `beam.io.WriteToText(path, num_shards=1, shard_name_template="")` does
for the dead letters, in four transforms instead of ten: each bundle streams
its lines to a piece `beam-temp-<name>-<id>/<uuid>.<name>` beside the target,
and one call (`CallOnce`) concatenates the committed pieces into the target
and removes the piece directory. A failed run leaves its pieces where
`pipelines.output_dir.recover_dead_letters` finds them, as Beam's sink does.
Pieces of bundles that failed and were retried are never listed, so never
concatenated; the line order across bundles is unspecified.
"""

from __future__ import annotations

import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from sparse_io.atomic import atomic_output
from transforms.beam.call_once import CallOnce

__all__ = ["PIECES_PREFIX", "WriteLineFile", "concatenate_pieces"]

PIECES_PREFIX = "beam-temp-"  # what pipelines.output_dir treats as a run's temporary directory
_COPY_BYTES = 1 << 20


class _WritePiecesFn(beam.DoFn):
    """Streams a bundle's lines to one new piece file; outputs its path when the bundle ends (none if empty)."""

    def __init__(self, pieces_dir: str, name: str):
        self._pieces_dir = pieces_dir
        self._name = name
        self._file = None
        self._path = None

    def start_bundle(self):
        self._file = None
        self._path = None

    def process(self, line: str):
        if self._file is None:
            self._path = FileSystems.join(self._pieces_dir, f"{uuid.uuid4().hex}.{self._name}")
            self._file = FileSystems.create(self._path)
        self._file.write(line.encode("utf-8") + b"\n")

    def finish_bundle(self):
        if self._file is None:
            return
        self._file.close()
        self._file = None
        yield WindowedValue(self._path, MIN_TIMESTAMP, (GlobalWindow(),))

    def teardown(self):
        if self._file is not None:
            self._file.close()


def concatenate_pieces(pieces: list[str], path: str, *, output_root: str | None = None) -> None:
    """Writes the files `pieces` (in sorted order) one after another to `path`, atomically.

    A piece that does not end its last line (cut short by a killed run) gets
    its newline, so every line of the result stays one line.
    """
    with atomic_output(path, output_root=output_root) as out:
        for piece in sorted(pieces):
            last = b"\n"
            with FileSystems.open(piece, compression_type="uncompressed") as f:
                while chunk := f.read(_COPY_BYTES):
                    out.write(chunk)
                    last = chunk[-1:]
            if last != b"\n":
                out.write(b"\n")


def _concatenate(pieces: list[str], path: str, pieces_dir: str, output_root: str | None) -> str:
    concatenate_pieces(pieces, path, output_root=output_root)
    # Every piece goes, those of retried bundles too; a local directory is then empty.
    found = [m.path for r in FileSystems.match([FileSystems.join(pieces_dir, "*")]) for m in r.metadata_list]
    if found:
        FileSystems.delete(found)
    if FileSystems.get_scheme(pieces_dir) is None and FileSystems.exists(pieces_dir):
        FileSystems.delete([pieces_dir])
    return path


class WriteLineFile(beam.PTransform):
    """Writes every `str` of the input as one UTF-8 line of the file at `path`; outputs `path` once, when written.

    The file is written whole or not at all (`sparse_io.atomic.atomic_output`),
    and exists, empty, when the input is. `output_root`: the directory the
    file must stay in (None: no check), as `atomic_output` takes it.

    Example:
      >>> import os, tempfile
      >>> import apache_beam as beam
      >>> from transforms.beam.runner import in_process_options
      >>> d = tempfile.mkdtemp()
      >>> with beam.Pipeline(options=in_process_options()) as p:
      ...     _ = p | beam.Create(["a", "b"]) | WriteLineFile(os.path.join(d, "errors", "lines.txt"))
      >>> sorted(open(os.path.join(d, "errors", "lines.txt")).read().split())
      ['a', 'b']
      >>> os.listdir(os.path.join(d, "errors"))
      ['lines.txt']
    """

    def __init__(self, path: str, *, output_root: str | None = None):
        super().__init__()
        self._path = path
        self._output_root = output_root

    def expand(self, lines):
        parent, name = FileSystems.split(self._path)
        pieces_dir = FileSystems.join(parent, f"{PIECES_PREFIX}{name}-{uuid.uuid4().hex}")
        pieces = lines | "WritePieces" >> beam.ParDo(_WritePiecesFn(pieces_dir, name))
        return lines.pipeline | "Concatenate" >> CallOnce(
            _concatenate, beam.pvalue.AsList(pieces), self._path, pieces_dir, self._output_root
        )
