"""UnitLoader: a unit decoded once into one-feature CsrGroups that view the Arrow buffers."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.tfdata.columnar.unit_loader import UnitLoader
from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.sharding import Unit

ITEMS = Column("items", "sparse", "int64", weighted=True)
USER = Column("user", "sparse", "int64")
PRICE = Column("price", "dense", "float32")
LABEL = Column("label", "label", "float32")


@pytest.fixture
def shard(tmp_path):
    table = pa.table(
        {
            "items": pa.array([[1, 2], [], [3], [4, 4, 5]], pa.list_(pa.int64())),
            "items__weights": pa.array([[0.5, 1.0], [], [2.0], [1.0, 1.0, 3.0]], pa.list_(pa.float32())),
            "user": pa.array([[7], [8], [], [9]], pa.list_(pa.int64())),
            "price": pa.array([1.5, None, 2.5, 3.5], pa.float32()),
            "label": pa.array([0.0, 1.0, 1.0, 0.0], pa.float32()),
        }
    )
    path = str(tmp_path / "part-0.parquet")
    pq.write_table(table, path, row_group_size=4)
    return path


def test_a_unit_slice_is_decoded_into_csr_groups_and_columns(shard):
    loader = UnitLoader([shard], [Unit(0, 0, 1, 4)], [ITEMS, USER, PRICE], LABEL)
    loaded = loader.unit(0, None)
    assert loaded.num_rows == 3
    items, user = loaded.columns["items"], loaded.columns["user"]
    assert items.names == ["items"] and items.num_rows == 3 and not items.scalar_weight
    assert items.row_splits.tolist() == [0, 0, 1, 4] and items.values.tolist() == [3, 4, 4, 5]
    assert items.weights.tolist() == [2.0, 1.0, 1.0, 3.0]
    # An unweighted feature keeps its one shared weight: no array of ones is made.
    assert user.scalar_weight and user.weights == 1.0 and user.values.tolist() == [8, 9]
    assert np.isnan(loaded.columns["price"][0]) and loaded.columns["price"][1:].tolist() == [2.5, 3.5]
    assert loaded.columns["label"].tolist() == [1.0, 1.0, 0.0]
    assert loader.unit(0, None) is loaded  # decoded once, then kept


def test_one_hot_presence_is_computed_per_unit_and_group(shard):
    loader = UnitLoader([shard], [Unit(0, 0, 0, 4)], [ITEMS, USER], None)
    loaded = loader.unit(0, None)
    presence, rows = loaded.one_hot_group(1, [USER])
    assert presence.tolist() == [[True, True, False, True]] and rows[0].tolist() == [0, 1, 3]
    assert loaded.one_hot_group(0, [ITEMS, USER]) is None  # items has rows of two and three ids
