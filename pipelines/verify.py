"""`python -m pipelines.verify DIR`: checks an output directory against its `_MANIFEST.json`.

By default everything is checked: the manifest is there, every file it lists
is there with its size and CRC-32C, no other file is there, every shard holds
its row count, and the shards add up to the manifest's rows out. Each
difference is printed on its own line.

Exit status: 0 when the directory matches its manifest; 2 when it does not
(or has none), or for bad flags; 1 for an internal error (a bug or an
unreadable file system), with one line saying so.

Example::

    $ python -m pipelines.verify out/train
    out/train: ok: 4 shards, 300,000 rows, 8 files checked (checksums)
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "verify_output"]


def _parser() -> argparse.ArgumentParser:
    from pipelines import cli

    p = cli.parser("pipelines.verify", __doc__, "DIR [--verify checksums|sizes] [--quiet]")
    p.add_argument("directory", metavar="DIR", help="the output directory (local or gs://)")
    # --verify, as in pipelines.train and pipelines.convert; --level is its earlier name, kept working unlisted.
    p.add_argument("--verify", choices=("checksums", "sizes"), default="checksums",
                   help="checksums: every byte and every shard's row count; sizes: file sizes and names only")
    p.add_argument("--level", dest="verify", choices=("checksums", "sizes"), default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", default=False, help="print nothing when the directory is ok")
    return p


def verify_output(directory: str, level: str = "checksums") -> tuple[dict, list[str]]:
    """(manifest, differences) of `directory`; ManifestError when it has no readable manifest."""
    from sparse_io.manifest import directory_differences

    return directory_differences(directory, level)


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.verify` with `argv` (default: the command line); errors exit as the module doc says."""
    from pipelines import cli

    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    cli.configure_logging(args.verbose)
    with cli.cli_errors("pipelines.verify"):
        manifest, problems = verify_output(args.directory, args.verify)
        for problem in problems:
            print(f"{args.directory}: {problem}", file=sys.stderr)
        if problems:
            print(f"pipelines.verify: error: {args.directory} differs from its manifest in {len(problems)} way(s)",
                  file=sys.stderr)
            sys.exit(2)
        if not args.quiet:
            rows = sum(e["rows"] for e in manifest["shards"])
            files = len(manifest["shards"]) + len(manifest.get("files", []))
            print(f"{args.directory}: ok: {len(manifest['shards'])} shards, {rows:,} rows, {files} files checked "
                  f"({args.verify})")


if __name__ == "__main__":
    main()
