"""The PPO objective of one minibatch as TensorFlow ops: what the update minimises and what it logs.

It puts together the pieces of `losses` as the paper does: the policy loss (the clipped surrogate L^CLIP, or
BatchPPO's KL penalty), plus `value_coef` times the value loss, minus `entropy_coef` times the entropy. The
learner builds it on its local copy of the networks; it takes tensors, not the learner, so it can be built and
checked on constants alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo import losses

METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
"""The names of `Objective.metrics`, as logged."""

ADVANTAGE_EPSILON = 1e-8
"""Added to the advantages' std when they are standardised, so a minibatch of equal advantages stays finite."""


@dataclass
class Objective:
    loss: tf.Tensor
    """The scalar the update minimises."""
    kl: tf.Tensor
    """(batch,): the exact KL(pi_old || pi) of each sample, which adapts the KL penalty once per iteration."""
    metrics: dict[str, tf.Tensor]
    """Scalars by name (`METRICS`), as logged."""


def ppo_objective(
    config: TrainerConfig,
    batch: dict[str, tf.Tensor],
    mean: tf.Tensor,
    log_std: tf.Tensor,
    value: tf.Tensor,
    kl_beta: tf.Tensor,
    clip_range: tf.Tensor | float,
    entropy_coef: tf.Tensor | float,
) -> Objective:
    """The objective of `batch` (the fields of `sampling.batch.Batch` by name: what the acting policy did
    and the advantages and returns it earned) for the policy N(`mean`, exp(`log_std`)^2) and the values
    `value` being trained; `kl_beta` weighs the KL penalty when `config.objective` is "kl_penalty"; `clip_range`
    is the surrogate's epsilon now (`config.clip_range` after its `clip_schedule`), `entropy_coef` the entropy
    bonus's weight now (`config.entropy_coef` after its `entropy_schedule`)."""
    log_prob = losses.gaussian_log_prob(batch["actions"], mean, log_std)
    log_ratio = losses.log_ratio(log_prob, batch.get("proximal_log_probs", batch["log_probs"]))
    ratio = tf.exp(log_ratio)
    kl = losses.gaussian_kl(batch["means"], batch["log_std"], mean, log_std)
    advantages = batch["advantages"]
    if config.normalize_advantages:
        adv_mean, adv_var = tf.nn.moments(advantages, axes=[0])
        advantages = (advantages - adv_mean) / (tf.sqrt(adv_var) + ADVANTAGE_EPSILON)
    weights = losses.behaviour_weights(batch)
    weighted = advantages if weights is None else weights * advantages
    pg_loss, clipfrac = losses.clipped_surrogate(ratio, weighted, clip_range)
    if config.objective == "kl_penalty":
        behaviour_ratio = ratio if weights is None else ratio * weights
        pg_loss = losses.kl_penalty(
            behaviour_ratio, advantages, kl, kl_beta, config.kl_target, config.kl_cutoff_factor, config.kl_cutoff_coef
        )
    v_loss = losses.value_loss(value, batch["values"], batch["returns"], config.value_clip)
    entropy = losses.gaussian_entropy(log_std)
    return Objective(
        loss=pg_loss + config.value_coef * v_loss - entropy_coef * entropy,
        kl=kl,
        metrics=dict(zip(METRICS, (pg_loss, v_loss, entropy, losses.approx_kl(log_ratio), clipfrac), strict=True)),
    )
