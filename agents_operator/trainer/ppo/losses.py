"""PPO's loss pieces as TensorFlow ops, named as in the paper and CleanRL.

Policy: either the clipped surrogate L^CLIP (Schulman et al. 2017, eq. 7) or BatchPPO's adaptive KL
penalty (Hafner et al. 2017; PPO paper section 4) with a quadratic cutoff for KL far above target.
Value: squared error to the lambda-returns, optionally clipped around the old prediction. Entropy: of
the diagonal Gaussian. Every function returns a scalar to minimise unless its name says otherwise.
"""

from __future__ import annotations

import math

import tensorflow as tf

LOG_RATIO_LIMIT = 10.0
"""The largest log probability ratio that counts (a ratio of e^10, about 22,000, far outside any clip range).

Why: float32's exp overflows to inf above 88.7, and a policy ratio gets there where the std is small and the
policies far apart, as when an async worker pulls weights a ps restored from an older checkpoint late in a run
(std 0.015 and 30 stds apart). An inf ratio times a behaviour weight that underflowed to 0 is NaN, an inf on
the clipped side still reaches the gradient as 0 x inf = NaN, and one NaN gradient makes every weight NaN.
Bounded, the products of a ratio, a weight, an advantage and the gradient of a log-probability stay finite;
a sample past the bound gives no gradient through its ratio."""


def log_ratio(log_prob: tf.Tensor, old_log_prob: tf.Tensor) -> tf.Tensor:
    """log(pi / pi_old) per sample, at most `LOG_RATIO_LIMIT`: what every ratio of the objective is the exp of."""
    return tf.minimum(log_prob - old_log_prob, LOG_RATIO_LIMIT)


def gaussian_log_prob(actions: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """log pi(a|s) of a diagonal Gaussian, summed over action dimensions: shape (batch,)."""
    z = (actions - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * math.log(2.0 * math.pi), axis=-1)


def gaussian_entropy(log_std: tf.Tensor) -> tf.Tensor:
    """Entropy of a diagonal Gaussian: of its (act_dim,) `log_std`, or the mean over a batch of per-sample
    (batch, act_dim) ones when the std depends on the state."""
    entropy = tf.reduce_sum(log_std + 0.5 * math.log(2.0 * math.pi * math.e), axis=-1)
    return entropy if log_std.shape.rank == 1 else tf.reduce_mean(entropy)


def gaussian_kl(old_mean: tf.Tensor, old_log_std: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """Exact KL(pi_old || pi) of diagonal Gaussians per sample: shape (batch,)."""
    old_var = tf.exp(2.0 * old_log_std)
    var = tf.exp(2.0 * log_std)
    per_dim = log_std - old_log_std + (old_var + tf.square(old_mean - mean)) / (2.0 * var) - 0.5
    return tf.reduce_sum(per_dim, axis=-1)


def clipped_surrogate(
    ratio: tf.Tensor, advantages: tf.Tensor, clip_range: tf.Tensor | float
) -> tuple[tf.Tensor, tf.Tensor]:
    """-L^CLIP and the fraction of samples whose ratio left [1 - eps, 1 + eps] (clipfrac)."""
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * tf.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
    pg_loss = tf.reduce_mean(tf.maximum(pg_loss1, pg_loss2))
    clipfrac = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > clip_range, tf.float32))
    return pg_loss, clipfrac


def behaviour_weights(batch: dict[str, tf.Tensor]) -> tf.Tensor | None:
    """pi_prox / pi_behaviour per sample where the batch was acted by a policy older than the one the update
    starts from (overlapped sampling, `proximal_log_probs` fed), else None.

    Decoupled PPO (Hilton et al. 2021, "Batch size-invariance for policy optimization", eq. 2): the clip is
    taken around the proximal policy, ratio pi / pi_prox, and each sample is weighted by pi_prox / pi_behaviour,
    so that min(ratio A, clip(ratio) A) times the weight is L^CLIP's importance-sampled estimate under the
    behaviour policy, and clipping still bounds how far the update moves from where it starts.
    """
    if "proximal_log_probs" not in batch:
        return None
    return tf.exp(log_ratio(batch["proximal_log_probs"], batch["log_probs"]))


def kl_penalty(
    ratio: tf.Tensor,
    advantages: tf.Tensor,
    kl: tf.Tensor,
    beta: tf.Tensor,
    kl_target: float,
    cutoff_factor: float,
    cutoff_coef: float,
) -> tf.Tensor:
    """BatchPPO's policy loss: -E[ratio * A] + beta * E[KL] + coef * E[max(0, KL - factor * target)^2].

    The quadratic term stops single updates that overshoot the target far more than the slowly adapting
    beta can correct.
    """
    surrogate = -tf.reduce_mean(ratio * advantages)
    cutoff = tf.reduce_mean(tf.square(tf.nn.relu(kl - cutoff_factor * kl_target)))
    return surrogate + beta * tf.reduce_mean(kl) + cutoff_coef * cutoff


def adapted_kl_beta(beta: tf.Tensor, kl: tf.Tensor, kl_target: float) -> tf.Tensor:
    """BatchPPO's penalty schedule: x1.5 when KL > 1.3 x target, /1.5 when KL < 0.7 x target."""
    increased = tf.where(kl > 1.3 * kl_target, beta * 1.5, beta)
    return tf.where(kl < 0.7 * kl_target, beta / 1.5, increased)


def value_loss(values: tf.Tensor, old_values: tf.Tensor, returns: tf.Tensor, value_clip: float | None) -> tf.Tensor:
    """0.5 E[(V - R)^2]; with `value_clip`, the pessimum with V clipped to old V +- value_clip."""
    v_loss_unclipped = tf.square(values - returns)
    if value_clip is None:
        return 0.5 * tf.reduce_mean(v_loss_unclipped)
    v_clipped = old_values + tf.clip_by_value(values - old_values, -value_clip, value_clip)
    v_loss_clipped = tf.square(v_clipped - returns)
    return 0.5 * tf.reduce_mean(tf.maximum(v_loss_unclipped, v_loss_clipped))


def approx_kl(log_ratio: tf.Tensor) -> tf.Tensor:
    """The low-variance KL estimator E[(ratio - 1) - log ratio] used by CleanRL (Schulman's k3)."""
    return tf.reduce_mean(tf.exp(log_ratio) - 1.0 - log_ratio)
