"""Which label trains which task, and the one line that refuses a task that does not fit (no training here)."""

import pytest

from pipelines.evaluation import summary_line
from pipelines.tasks import TaskError, describe_label_values, resolve_task
from sparse_io.schema import FeatureSpec, Schema

USER = FeatureSpec("user", "sparse", "string", hash_buckets=10)
WHEN = FeatureSpec("when", "dense", "int64", time_unit="s")


def _flat(label: FeatureSpec) -> Schema:
    return Schema([label, USER, WHEN])


@pytest.mark.parametrize("label, task", [
    (FeatureSpec("click", "label", "int64"), "ctr"),
    (FeatureSpec("click", "label", "int64", label_type="binary"), "ctr"),
    (FeatureSpec("rating", "label", "int64", label_type="integer"), "regression"),
    (FeatureSpec("listens", "label", "int64", label_type="integer"), "regression"),
    (FeatureSpec("amount", "label", "float32"), "regression"),
    (FeatureSpec("amount", "label", "float64", label_type="real"), "regression"),
])
def test_auto_picks_the_task_from_the_label(label, task):
    picked = resolve_task(_flat(label))
    assert picked.name == task and picked.label == label.name and picked.features == ("user", "when")


def test_ctr_on_an_integer_label_of_zeros_and_ones_is_allowed_when_asked():
    label = FeatureSpec("bought", "label", "int64", label_type="integer")
    assert resolve_task(_flat(label), "ctr", {"min": 0, "max": 1, "value_counts": [[0, 5], [1, 3]]}).name == "ctr"
    with pytest.raises(TaskError, match=r"^--task ctr needs a 0/1 click label, but label 'bought' \(label_type "
                                        r"integer\) has values from 0 to 352698: use --task regression$"):
        resolve_task(_flat(label), "ctr", {"min": 0, "max": 352698})


def test_a_task_that_does_not_fit_is_refused_in_one_line_naming_the_values():
    click = _flat(FeatureSpec("click", "label", "int64"))
    with pytest.raises(TaskError) as refusal:
        resolve_task(click, "regression", {"min": 0, "max": 1, "value_counts": [[0, 7], [1, 2]]})
    assert str(refusal.value) == ("--task regression needs an integer or real label, but label 'click' (label_type "
                                  "binary: clicks) has values 0, 1: use --task ctr")
    for task in ("rating", "next_item"):
        with pytest.raises(TaskError, match=f"--task {task}: needs a history ingest"):
            resolve_task(click, task)
    with pytest.raises(TaskError, match="--task ctr: schema.json has no label"):
        resolve_task(Schema([USER]), "ctr")
    assert isinstance(TaskError("x"), ValueError)  # callers that caught ValueError still do


def test_exclude_leaves_columns_out_and_refuses_unknown_names_or_the_label():
    rating = _flat(FeatureSpec("rating", "label", "int64", label_type="integer"))
    assert resolve_task(rating, exclude=("when",)).features == ("user",)
    with pytest.raises(TaskError, match=r"no feature\(s\) \['nope'\]"):
        resolve_task(rating, exclude=("nope",))
    with pytest.raises(TaskError, match="--exclude rating: that is the label"):
        resolve_task(rating, exclude=("rating",))


def test_label_values_are_described_as_stats_json_records_them():
    assert describe_label_values({"min": 1.0, "max": 5.0, "value_counts": [[1, 2], [2, 1], [5, 9]]}) == "values 1, 2, 5"
    assert describe_label_values({"min": 0.5, "max": 7.25}) == "values from 0.5 to 7.25"
    assert describe_label_values(None) == "values not recorded in stats.json"


def test_the_summary_line_sets_each_metric_beside_its_baseline():
    line = summary_line("regression", {"eval_rows": 40, "eval_rmse": 1.1, "eval_mae": 0.9, "label_mean": 3.6,
                                       "eval_baseline_rmse": 1.25, "eval_baseline_mae": 1.0})
    assert line == ("held-out (40 rows): RMSE 1.1000, MAE 0.9000; always predicting the mean 3.6000 of the training "
                    "labels: RMSE 1.2500, MAE 1.0000")
    assert summary_line("ctr", {"eval_rows": 0}) is None
