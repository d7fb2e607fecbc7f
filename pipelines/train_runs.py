"""The state a `--model_dir` holds between runs of `pipelines.train`: its checkpoint and its run records.

A model directory with a checkpoint is continued only when asked (`--resume`)
or started over only when asked (`--overwrite`); otherwise the run is refused
before anything is written. `train_result.json` keeps one entry per run that
trained at least one step, oldest first:

    {"format_version": 2, "runs": [{"task": "ctr", "steps": 80, "loss": 0.45, ...}, ...]}

A file of the older layout (one run's dict) is read as one run and kept.
"""

from __future__ import annotations

import json
import os
import shutil

from pipelines.errors import UsageError

__all__ = ["RESULT_FILE", "check_model_dir", "record_run", "read_runs", "latest_run", "saved_step"]

RESULT_FILE = "train_result.json"
_FORMAT_VERSION = 2
# What `pipelines.train` writes into a model directory; --overwrite removes these and nothing else.
TRAINER_ENTRIES = ("checkpoints", "export", "workers", "best_checkpoints")


def saved_step(checkpoint_dir: str) -> int | None:
    """The step of the latest checkpoint in `checkpoint_dir` (its `ckpt-<step>` name); None without one."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(checkpoint_dir)
    return None if latest is None else int(latest.rsplit("-", 1)[1])


def check_model_dir(model_dir: str, checkpoint_dir: str, *, resume: bool, overwrite: bool, chief: bool) -> str:
    """Refuses a checkpointed model directory unless `resume` or `overwrite`; returns how this run starts.

    With `overwrite`, removes the checkpoints of this process (the chief: also the export), so the run
    starts from fresh weights; the run records in train_result.json are kept. Returns "fresh", "resumed"
    or "overwrote".

    Raises:
      UsageError: a checkpoint is there and neither `resume` nor `overwrite` says what to do with it.
    """
    step = saved_step(checkpoint_dir)
    if step is None:
        return "fresh"
    if resume:
        return "resumed"
    if not overwrite:
        raise UsageError(f"--model_dir {model_dir} holds a checkpoint at step {step}: give --resume to continue "
                         "it or --overwrite to start over")
    shutil.rmtree(checkpoint_dir)
    if chief:
        shutil.rmtree(os.path.join(model_dir, "export"), ignore_errors=True)
    return "overwrote"


def read_runs(model_dir: str) -> list[dict]:
    """The runs recorded in `model_dir`'s train_result.json, oldest first ([] without the file)."""
    path = os.path.join(model_dir, RESULT_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        try:
            recorded = json.load(f)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path} is not valid JSON ({e}); move it away to record new runs") from None
    if isinstance(recorded, dict) and isinstance(recorded.get("runs"), list):
        return recorded["runs"]
    return [recorded]  # the older layout: one run's dict


def latest_run(model_dir: str) -> dict:
    """The last run recorded in `model_dir` ({} when none is)."""
    runs = read_runs(model_dir)
    return runs[-1] if runs else {}


def record_run(model_dir: str, run: dict) -> None:
    """Appends `run` to `model_dir`'s train_result.json, replacing the file atomically."""
    runs = [*read_runs(model_dir), dict(run)]
    path = os.path.join(model_dir, RESULT_FILE)
    os.makedirs(model_dir, exist_ok=True)
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump({"format_version": _FORMAT_VERSION, "runs": runs}, f, indent=2)
    os.replace(partial, path)
