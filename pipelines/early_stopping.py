"""Training in rounds that stops when the held-out loss stops falling, and keeps the best model.

`pipelines.train` trains a fixed number of steps. On a small log that many
steps memorise the training rows: the training loss falls while the loss on
held-out rows rises above what always predicting the base rate scores. Here
training runs to step n, 2n, 4n, ... (n is half an epoch, at least 5 steps;
each round resumes the previous one's checkpoint), the held-out loss is measured after each round, and the
first round that does not improve on the best one ends training; the best
round's checkpoint is then restored and exported.
"""

from __future__ import annotations

import math
import os
import shutil

__all__ = ["round_ends", "train_with_early_stopping"]

_SHORTEST_ROUND = 5
_BEST_DIR = "best_checkpoints"


def round_ends(done: int, steps: int, first: int = _SHORTEST_ROUND) -> list[int]:
    """The steps at which rounds end after `done`: `first`, doubling, the last one `steps`.

    Example:
      >>> round_ends(0, 60)
      [5, 10, 20, 40, 60]
      >>> round_ends(12, 30)
      [20, 30]
      >>> round_ends(0, 300, first=59)
      [59, 118, 236, 300]
    """
    ends, end = [], max(first, 1)
    while end < steps:
        if end > done:
            ends.append(end)
        end *= 2
    return ends + [steps] if steps > done else ends


def train_with_early_stopping(train_argv: list[str], model_dir: str, steps: int, done: int = 0,
                              steps_per_epoch: int = 1, say=print) -> dict:
    """Trains `pipelines.train` in rounds for at most `steps` steps, stopping when a round does not improve.

    `train_argv` names --data, --eval_data and --model_dir `model_dir`, but
    not --steps, --export, --checkpoint_every, --resume or --overwrite; the
    first round is half an epoch of `steps_per_epoch` steps (at least 5).
    Every round is one run in `model_dir`'s train_result.json.

    Returns the best round's `TrainResult`, with `stopped_at` (the step of the
    first round that did not improve, or None) and `export` (the SavedModel of
    the best round) added.
    """
    from pipelines.train import CHECKPOINT_DIR, train

    checkpoints = os.path.join(model_dir, CHECKPOINT_DIR)
    best_copy = os.path.join(model_dir, _BEST_DIR)
    best, stopped_at = None, None
    ends = round_ends(done, steps, max(_SHORTEST_ROUND, math.ceil(steps_per_epoch / 2)))
    if not ends:
        raise ValueError(f"early stopping: the model has trained {done} steps, not below the {steps} asked for")
    for end in ends:
        # Each round goes on from the previous one's checkpoint (the first from `done`, or fresh).
        result = train([*train_argv, "--resume", "--steps", str(end), "--export", "none",
                        # one checkpoint per round, written when the round ends
                        "--checkpoint_every", str(steps + 1)], announce_task=end == ends[0])
        say(f"  step {end:>5}: training loss {result['loss']:.4f}, held-out loss {result['eval_loss']:.4f}")
        if best is not None and not result["eval_loss"] < best["eval_loss"]:
            stopped_at = end
            break
        best = result
        shutil.rmtree(best_copy, ignore_errors=True)
        shutil.copytree(checkpoints, best_copy)
    if stopped_at is not None:
        say(f"  held-out loss rose at step {stopped_at}: keeping the model of step {best['steps']}")
        shutil.rmtree(checkpoints)
        shutil.copytree(best_copy, checkpoints)
    shutil.rmtree(best_copy, ignore_errors=True)
    # Restores the best checkpoint and exports it, training nothing and recording no run.
    exported = train([*_without_eval(train_argv), "--steps", str(best["steps"]), "--quiet"], export_only=True)
    return {**best, "stopped_at": stopped_at, "export": exported.get("export")}


def _without_eval(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--eval_data":
            skip = True
        else:
            out.append(a)
    return out
