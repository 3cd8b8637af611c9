"""Load an exported policy (`agents-operator export`, or a job's `exported/`) and act with it.

Needs only TensorFlow and numpy: no gymnasium, no simulator, nothing of the trainer (a test imports this module
in a fresh interpreter and checks). The policy acts through the SavedModel's signatures, as TensorFlow Serving
runs them, so what it does here is what a served model does:

    from agents_operator.exported import policy
    pi = policy.load("runs/pendulum/exported")
    action = pi(observation)                      # deterministic, clipped to the action bounds
    actions, log_probs = pi.sample(observations, seed=7)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from agents_operator import exported, tflogs
from agents_operator.exported import ExportError, Metadata

__all__ = ["ExportError", "Metadata", "Policy", "load"]


class Policy:
    """An exported policy: call it on one raw observation or a batch of them (first axis) for actions."""

    def __init__(self, directory: Path, model: tf.Module, metadata: Metadata):
        self.directory = directory
        self.metadata = metadata
        self._model = model  # keeps the variables the signatures read alive
        self._act = model.signatures[exported.ACT]
        self._sample = model.signatures[exported.SAMPLE]

    def _batch(self, observations: np.ndarray) -> tuple[tf.Tensor, bool]:
        """The observations as a float32 batch, and whether one observation was given."""
        array = np.asarray(observations, np.float32)
        single = array.shape == tuple(self.metadata.observation_shape)
        batch = array[None] if single else array
        if batch.shape[1:] != tuple(self.metadata.observation_shape):
            raise ValueError(
                f"observations of shape {array.shape}: expected {self.metadata.observation_shape} or a batch"
            )
        return tf.constant(batch), single

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        """The deterministic actions (the `act` signature): one action for one observation, else a batch."""
        batch, single = self._batch(observations)
        actions = self._act(**{exported.OBSERVATIONS: batch})[exported.ACTIONS].numpy()
        return actions[0] if single else actions

    def sample(self, observations: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Stochastic actions (unclipped, as the trainer draws them) and their log-probabilities (`sample`):
        the same seed and observations give the same actions."""
        batch, single = self._batch(observations)
        out = self._sample(**{exported.OBSERVATIONS: batch, exported.SEED: tf.constant(seed, tf.int64)})
        actions, log_probs = out[exported.ACTIONS].numpy(), out[exported.LOG_PROBS].numpy()
        return (actions[0], log_probs[0]) if single else (actions, log_probs)


def load(directory: str | Path) -> Policy:
    """The exported policy in `directory`; ExportError (one line, naming the file) when there is none."""
    directory = Path(directory)
    metadata = exported.read_metadata(directory)
    try:
        model = tf.saved_model.load(str(directory))
    except (OSError, ValueError, tf.errors.OpError) as error:
        raise ExportError(f"{directory}: the SavedModel cannot be loaded: {str(error).splitlines()[0]}") from None
    missing = [name for name in (exported.ACT, exported.SAMPLE) if name not in model.signatures]
    if missing:
        raise ExportError(f"{directory}: the SavedModel has no signature {', '.join(missing)}")
    policy = Policy(directory, model, metadata)
    _warm_up(policy)
    return policy


def _warm_up(policy: Policy) -> None:
    """Run each signature once, so that TensorFlow optimises its graph now, with its native warnings (grappler's
    "Not handling type DT_DOUBLE" for the float64 networks, ten per signature) filtered (`tflogs`), and not at the
    user's first action."""
    observation = np.zeros(policy.metadata.observation_shape, np.float32)
    with contextlib.ExitStack() as stack:
        if not tflogs.shown(os.environ):
            stack.enter_context(tflogs.filtered_stderr())
        policy(observation)
        policy.sample(observation, seed=0)
