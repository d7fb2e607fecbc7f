"""The config reference: every key the parser accepts is declared once, with the defaults the parser applies,
and docs/config.md is the reference the declarations render."""

import dataclasses
import pathlib
import re

import pytest
import yaml

from pipelines.config import INGEST_WRITTEN_KEYS, ConfigError, parse_config
from pipelines.config_columns import SOURCE_KEYS
from pipelines.config_keys import KEY_BY_PATH, KEYS, SECTIONS, reference_markdown
from sparse_io.schema import FeatureSpec

REPO = pathlib.Path(__file__).resolve().parents[1]
CSV_SCHEMA = [{"name": "label", "kind": "label", "dtype": "int64"},
              {"name": "user", "kind": "sparse", "dtype": "string"},
              {"name": "price", "kind": "dense", "dtype": "float32"},
              {"name": "ts", "kind": "dense", "dtype": "int64"}]


def _base() -> dict:
    return {"input": {"format": "csv", "schema": [dict(s) for s in CSV_SCHEMA]},
            "features": {"user": {"hash_buckets": 10}}}


def _allowed_in_error(config: dict) -> set[str]:
    """The key names a ConfigError lists as allowed for the mapping that got the unknown key."""
    with pytest.raises(ConfigError) as caught:
        parse_config(config)
    found = re.search(r"allowed: ([^)]*)\)", str(caught.value))
    assert found, str(caught.value)
    return {name.strip() for name in found.group(1).split(",")}


def _declared(section: str) -> set[str]:
    return {key.name for key in KEYS if key.section == section}


def _with_unknown(section: str) -> dict:
    config = _base()
    config["histories"] = None
    if section == "":
        config["zz_unknown"] = 1
    elif section == "features.<name>":
        config["features"]["user"]["zz_unknown"] = 1
    elif section == "features.<name>.vocabulary":
        config["features"]["user"] = {"vocabulary": {"zz_unknown": 1}}
    elif section == "features.<derived>":
        config["features"]["price_z"] = {"source": "price", "scale": "z_score", "zz_unknown": 1}
    elif section == "features.<derived>.bucketize":
        config["features"]["price_q"] = {"source": "price", "bucketize": {"quantiles": 4, "zz_unknown": 1}}
    elif section == "features.<cross>":
        config["features"]["user_x_ts"] = {"cross": ["user", "ts"], "hash_buckets": 5, "zz_unknown": 1}
    elif section == "join[]":
        config["join"] = [{"table": "users.tsv", "key": "user", "columns": ["age"], "zz_unknown": 1}]
    elif section == "histories":
        config["histories"] = {"key": "ts", "item": "ts", "time": "ts", "zz_unknown": 1}
    else:
        config.setdefault(section, {})["zz_unknown"] = 1
    return {k: v for k, v in config.items() if v is not None}


@pytest.mark.parametrize("section", ["", "input", "features.<name>", "features.<name>.vocabulary",
                                     "features.<derived>", "features.<derived>.bucketize", "features.<cross>",
                                     "histories", "join[]", "output", "stats", "validation"])
def test_every_key_a_config_mapping_accepts_is_declared_and_nothing_more(section):
    assert _allowed_in_error(_with_unknown(section)) == _declared(section)


def test_a_schema_entry_accepts_exactly_the_declared_keys():
    # What FeatureSpec reads, less what only the ingest writes, plus what the config reads from the log.
    readable = {f.name for f in dataclasses.fields(FeatureSpec)} - set(INGEST_WRITTEN_KEYS) - {"history_role"}
    assert _declared("input.schema[]") == readable | set(SOURCE_KEYS) | {"unit", "null_values"}


def test_every_declared_key_belongs_to_a_section_of_the_reference():
    assert {key.section for key in KEYS} <= set(SECTIONS)
    assert len(KEY_BY_PATH) == len(KEYS)  # a key declared twice would hide one of its declarations


# path -> where the parsed config keeps it: each declared literal default must be what the parser applies.
DEFAULT_TARGETS = {
    "error_budget": lambda c: c.error_budget,
    "input.list_separator": lambda c: c.list_separator,
    "input.batch_size": lambda c: c.read_batch_size,
    "input.strict": lambda c: c.strict,
    "input.max_line_bytes": lambda c: c.max_line_bytes,
    "input.encoding": lambda c: c.encoding,
    "output.format": lambda c: c.output.format,
    "output.row_group_size": lambda c: c.output.row_group_size,
    "output.shuffle": lambda c: c.output.shuffle,
    "output.seed": lambda c: c.output.seed,
    "stats.batch_sizes": lambda c: list(c.batch_sizes),
    "histories.max_length": lambda c: c.histories.max_length,
    "histories.min_length": lambda c: c.histories.min_length,
    "histories.dedupe_consecutive": lambda c: c.histories.dedupe_consecutive,
    "histories.examples_per_event": lambda c: c.histories.examples_per_event,
    "histories.item_columns": lambda c: list(c.histories.item_columns),
    "histories.memory_budget_mb": lambda c: c.histories.memory_budget_mb,
    "features.<name>.vocabulary.min_frequency": lambda c: c.plan("user").min_frequency,
    "features.<name>.vocabulary.num_oov_buckets": lambda c: c.plan("user").num_oov_buckets,
}


@pytest.mark.parametrize("path", sorted(DEFAULT_TARGETS))
def test_a_declared_default_is_the_value_the_parser_applies(path):
    config = _base()
    if path.startswith("histories."):
        config = {"input": {"format": "csv", "schema": [{"name": n, "kind": "dense", "dtype": "int64"}
                                                        for n in ("user", "item", "ts")]},
                  "histories": {"key": "user", "item": "item", "time": "ts"}, "features": {"item": {"hash_buckets": 9}}}
    if path.startswith("features.<name>.vocabulary"):
        config["features"]["user"] = {"vocabulary": {}}
    parsed = parse_config(config)
    assert DEFAULT_TARGETS[path](parsed) == yaml.safe_load(KEY_BY_PATH[path].default)


def test_the_formats_a_key_allows_are_the_formats_there_are():
    from sparse_io.formats import LOG_FORMATS, SHARD_FORMATS

    assert KEY_BY_PATH["input.format"].allowed.split(", ") == list(LOG_FORMATS)
    assert KEY_BY_PATH["join[].format"].allowed.split(", ") == list(LOG_FORMATS)
    assert KEY_BY_PATH["output.format"].allowed.split(", ") == list(SHARD_FORMATS)


def test_the_scalings_a_derived_feature_allows_are_the_ones_there_are():
    from sparse_io.numeric_maps import SCALE_METHODS

    assert KEY_BY_PATH["features.<derived>.scale"].allowed.split(", ") == list(SCALE_METHODS)


def test_the_input_format_defaults_to_criteo():
    assert parse_config({"features": {"C*": {"hash_buckets": 10}}}).format == KEY_BY_PATH["input.format"].default


def test_docs_config_md_is_the_generated_reference():
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert text == reference_markdown(), "regenerate: python -m pipelines.ingest --config_reference > docs/config.md"


def test_the_reference_lists_every_declared_key_with_its_type_and_default():
    text = reference_markdown()
    for key in KEYS:
        section = "top level" if not key.section else f"`{key.section}`"
        body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
        row = next((line for line in body.splitlines() if line.startswith(f"| `{key.name}` |")), None)
        assert row is not None, key.path
        assert f"| {key.type} |" in row


def test_the_ingest_prints_the_reference_without_importing_beam_or_tensorflow():
    import os
    import subprocess
    import sys

    probe = ("import runpy, sys\nsys.argv = ['pipelines.ingest', '--config_reference']\n"
             "try:\n    runpy.run_module('pipelines.ingest', run_name='__main__')\nexcept SystemExit as e:\n"
             "    code = e.code\nheavy = sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules)\n"
             "sys.stderr.write(f'heavy={heavy} code={code}')\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.stdout == reference_markdown()
    assert done.stderr.strip().endswith("heavy=[] code=0"), done.stderr[-500:]
