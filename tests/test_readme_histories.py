"""The "User histories" guide's config is one the ingest accepts, and says what it does."""

import pathlib
import re

import yaml

from pipelines.config import parse_config

GUIDE = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "histories.md").read_text(encoding="utf-8")


def test_the_readme_history_config_is_valid_with_a_schema_of_its_columns():
    (block,) = re.findall(r"```\n(.*?)```", GUIDE, flags=re.S)
    config = yaml.safe_load(block)
    config["input"] = {"format": "csv", "schema": [
        {"name": "user_id", "kind": "dense", "dtype": "int64"},
        {"name": "movie_id", "kind": "dense", "dtype": "int64"},
        {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "s"},
        {"name": "rating", "kind": "dense", "dtype": "float32"},
        {"name": "category", "kind": "dense", "dtype": "string"},
        {"name": "gender", "kind": "sparse", "dtype": "string"},
    ]}
    parsed = parse_config(config)
    h = parsed.histories
    assert (h.item_columns, h.context_from, h.examples_per_event) == (("category",), "day1/*.csv", True)
    assert h.event_columns(parsed.schema) == ["gender"]
    assert {p.name for p in parsed.vocabularies} == {"movie_id"}
