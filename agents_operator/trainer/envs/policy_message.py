"""The policy in a message: the numpy policy and the observation statistics it acts with, as plain values.

Whatever acts for the trainer outside its process gets the policy this way: a `BatchEnv` worker process
for a rollout or an evaluation episode (pickled over its pipe), an env server for Collect and Evaluate
(`envserver.protocol` encodes the same dict on the wire).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy


def policy_message(policy: NumpyPolicy, observations: Normalizer) -> dict[str, Any]:
    """The policy and the observation statistics it acts with, as Collect and Evaluate requests carry them."""
    weights = [array for layer in policy.policy for array in layer] + [policy.log_std]
    weights += [array for layer in policy.value for array in layer]
    moments = observations.acting_moments
    return {
        "weights": weights,
        "num_policy_layers": len(policy.policy),
        "activation": policy.activation,
        "observation_moments": [moments.count, np.asarray(moments.sum), np.asarray(moments.sumsq)],
        "clip_observations": observations.clip,
        "normalize_observations": observations.enabled,
        "observations_per_step": observations.per_step,
    }


def parse_policy(message: dict[str, Any], observation_shape: tuple[int, ...]) -> tuple[NumpyPolicy, Normalizer]:
    """The policy and the normaliser of a Collect or Evaluate request, as the trainer had them."""
    policy = NumpyPolicy.from_values(list(message["weights"]), message["num_policy_layers"], message["activation"])
    per_step = message["observations_per_step"]
    if not isinstance(per_step, bool):
        raise TypeError(f"observations_per_step: {per_step!r}, must be true or false")
    clip, enabled = message["clip_observations"], message["normalize_observations"]
    normalizer = Normalizer(observation_shape, clip, enabled, per_step)
    count, total, squares = message["observation_moments"]
    normalizer.shared = Moments(float(count), total, squares)
    return policy, normalizer
