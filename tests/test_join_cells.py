"""Serving parses a joined column's cells with its side table's rules (list separator, null tokens)."""

import tensorflow as tf

from sparse_io.schema import FeatureSpec
from transforms.tfdata.logs.cells import CellRules, parse_cells


def _record(fmt="csv"):
    return {"format": fmt, "list_separator": "|", "null_values": [""], "joins": [
        {"columns": ["genres", "gender"], "list_separator": " ", "null_values": ["", "NA"],
         "feature_null_values": [["gender", ["?"]]]},
        {"columns": ["zips"], "list_separator": "|", "null_values": None, "feature_null_values": []},
    ]}


def test_a_joined_column_takes_its_table_s_separator_and_null_tokens():
    rules = CellRules.from_config_record(_record())
    specs = [FeatureSpec(name, "sparse", "string") for name in ("tags", "genres", "gender", "zips")]
    cells = {"tags": tf.constant(["a|b", "NA"]), "genres": tf.constant(["Drama Comedy", "NA"]),
             "gender": tf.constant(["F", "?"]), "zips": tf.constant(["1|2", ""])}
    got = {name: column.to_list() for name, column in parse_cells(cells, specs, rules).items()}
    assert got["tags"] == [[b"a", b"b"], [b"NA"]]  # the log's own rules: "NA" is an id there
    assert got["genres"] == [[b"Drama", b"Comedy"], []]
    assert got["gender"] == [[b"F"], []]
    assert got["zips"] == [[b"1", b"2"], []]  # a table without null tokens of its own: the log's


def test_a_criteo_log_s_joined_column_is_a_list_cell_not_a_hex_id():
    rules = CellRules.from_config_record(_record("criteo"))
    got = parse_cells({"genres": tf.constant(["Drama Comedy", ""])}, [FeatureSpec("genres", "sparse", "string")],
                      rules)
    assert got["genres"].to_list() == [[b"Drama", b"Comedy"], []]
