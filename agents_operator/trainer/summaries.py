"""TensorBoard summaries: scalars written with a `tf.compat.v1.summary.FileWriter`, step = env steps.

Summaries are built as protocol buffers in Python rather than as graph ops, so the learner's graph has
nothing to run for them and the distributed graph stays the same. Every tag written is in `TAGS`, with
its meaning; writing any other tag is an error, so the list stays complete.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from agents_operator.trainer import rundir

TAGS = {
    "train/mean_return": "undiscounted return of the training episodes that ended during the iteration",
    "train/mean_length": "length of those episodes",
    "eval/mean_return": "return of the deterministic policy (Gaussian mean) over eval_episodes episodes",
    "eval/mean_length": "length of those evaluation episodes",
    "loss/policy": "policy loss: -L^CLIP, or BatchPPO's KL-penalised surrogate (mean over minibatches)",
    "loss/value": "0.5 x squared error of the value function to the lambda-returns (clipped if value_clip)",
    "policy/entropy": "entropy of the Gaussian policy",
    "policy/kl": "exact mean KL(acting policy || updated policy) over the iteration's batch",
    "policy/approx_kl": "CleanRL's estimator E[(ratio - 1) - log ratio], mean over minibatches",
    "policy/clipfrac": "fraction of samples with |ratio - 1| > clip_range, mean over minibatches",
    "policy/clip_range": "epsilon of the clipped surrogate (after the clip_schedule)",
    "policy/entropy_coef": "weight of the entropy bonus (after the entropy_schedule)",
    "policy/kl_beta": "BatchPPO's adaptive KL penalty coefficient (changes only with objective=kl_penalty)",
    "policy/std": "mean standard deviation of the Gaussian policy (state-dependent: of its exploration weights)",
    "optimizer/learning_rate": "Adam step size (after the lr_schedule)",
    "optimizer/grad_norm": "global gradient norm before clipping",
    "optimizer/discarded_updates": "this process's updates so far whose change was not finite (NaN or inf): each "
    "was pushed as no change, and its Adam started afresh",
    "perf/env_steps_per_second": "environment steps per second of the whole iteration (sampling + update)",
    "perf/sampling_steps_per_second": "environment steps per second while sampling only",
    "perf/simulation_share": "share of the sampling processes' time spent stepping the environments (the rest: "
    "acting, normalising, exchanges, waiting); absent where the policy acts in the trainer over env servers",
    "perf/ps_share": "share of the update spent with the shared variables: pull, push (in sync mode this "
    "includes waiting for the other workers) and the closing read, against the local PPO epochs",
    "sync/dropped_changes": "sync chief only: workers' changes dropped so far in the job because they came after "
    "their step was applied (backupWorkers)",
    "async/staleness": "async chief in a cluster: updates other workers applied between its pull and its push",
    "async/turn_wait_seconds": "async chief in a cluster with updates in turn (asyncUpdates: in_turn): seconds it "
    "waited for its turn to update",
}


class SummaryWriter:
    """Appends scalar summaries to an event file in `logdir`."""

    def __init__(self, logdir: Path):
        import tensorflow as tf

        self._tf = tf
        with tf.Graph().as_default():  # FileWriter refuses to be created in eager mode
            self._writer = tf.compat.v1.summary.FileWriter(str(logdir))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        unknown = set(values) - set(TAGS)
        if unknown:
            raise KeyError(f"undocumented summary tags: {sorted(unknown)}")
        summary = self._tf.compat.v1.Summary(
            value=[self._tf.compat.v1.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()]
        )
        self._writer.add_summary(summary, step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def read_scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """All (step, value) points of `tag` in the event files directly in `logdir`, sorted by step.

    A resumed run appends a second event file; a step written by both keeps the later value.
    """
    return read_tags(logdir, [tag])[tag]


def read_tags(logdir: Path, tags: Iterable[str]) -> dict[str, list[tuple[int, float]]]:
    """`read_scalars` of each of `tags`, in one pass over the event files."""
    import tensorflow as tf

    points: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    for path in sorted(glob.glob(os.path.join(str(logdir), rundir.EVENTS)), key=os.path.getmtime):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag in points:
                    points[value.tag][int(event.step)] = float(value.simple_value)
    return {tag: sorted(found.items()) for tag, found in points.items()}
