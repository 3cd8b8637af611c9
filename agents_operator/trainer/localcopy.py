"""A worker's own copy of the networks and the PPO update on it: the weights the epochs train, the shared
weights they started from (`anchor`), this worker's Adam, and one update of `epochs` x `minibatches` Adam steps
(`update`). The learner (`learner`) pulls the shared weights into it before an update and pushes the change
after (`replicas`).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import replicas
from agents_operator.trainer.ppo import epochs, losses
from agents_operator.trainer.ppo.networks import Networks, mlp_tf
from agents_operator.trainer.ppo.objective import Objective, ppo_objective


@dataclass
class LocalCopy:
    """This worker's copy: the networks the PPO epochs update, the shared weights they started from
    (`anchor`), the counters the update reads, the global step the pull read (`pulled_step`: an async
    push's staleness is counted from it), and the floor of its annealed clip (`TrainerConfig.clip_floor`)."""

    networks: Networks
    anchor: Networks
    env_steps: tf.Variable
    kl_beta: tf.Variable
    pulled_step: tf.Variable
    clip_floor: float

    @classmethod
    def create(cls, config: TrainerConfig, obs_dim: int, act_dim: int, anchored: bool = False) -> LocalCopy:
        """The copy's variables; `anchored`: this is an async worker in a cluster (`Learner.anchored`)."""
        with tf.compat.v1.variable_scope("local"):
            networks = Networks.create(obs_dim, act_dim, config)
            with tf.compat.v1.variable_scope("anchor"):
                anchor = Networks.create(obs_dim, act_dim, config)
            env_steps = replicas.counter("env_steps", tf.int64, [])
            kl_beta = replicas.counter("kl_beta", tf.float32, [], config.kl_init_penalty)
            pulled_step = replicas.counter("pulled_step", tf.int64, [])
        return cls(networks, anchor, env_steps, kl_beta, pulled_step, config.clip_floor(anchored))

    def pull(self, shared: replicas.Shared) -> tf.Operation:
        """Copy the shared weights and counters into this worker's copy."""
        weights = shared.networks.variables()
        return tf.group(
            *(w.assign(s) for s, w in zip(weights, self.networks.variables(), strict=True)),
            *(a.assign(s) for s, a in zip(weights, self.anchor.variables(), strict=True)),
            self.env_steps.assign(shared.counters["env_steps"]),
            self.kl_beta.assign(shared.counters["kl_beta"]),
            self.pulled_step.assign(shared.counters["global_step"]),
            name="pull",
        )

    def anchored(self, config: TrainerConfig, feeds: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """`feeds` with the update's proximal policy made the weights it pulled (`anchor`): each action's
        log-probability under them, as `proximal_log_probs` (decoupled PPO's, `ppo.losses.behaviour_weights`).

        Why: an async worker in a cluster acts with the state it read at the end of its last iteration, and
        other workers push before its next pull. Clipped around that older policy, the update would start
        outside the clip range and pull the weights back towards it, undoing the other workers' changes;
        clipped around the pulled weights, it moves from where it starts, and the samples are weighted by how
        much likelier the pulled weights make them than the policy that acted.
        """
        mean, log_std = self.anchor.gaussian(feeds["observations"], config.activation)
        return {**feeds, "proximal_log_probs": losses.gaussian_log_prob(feeds["actions"], mean, log_std)}

    def annealed(self, config: TrainerConfig, value: float, schedule: str, floor: float = 0.0) -> tf.Tensor:
        """`value`, or with the `linear` schedule `value` x (1 - progress), progress the env steps counted so
        far over `total_steps` (SB3's and the zoo's `lin_<value>`), never below `floor`: the rule of the
        lr_schedule, clip_schedule and entropy_schedule."""
        annealed = tf.constant(value)
        if schedule == "linear":
            progress = tf.cast(self.env_steps.read_value(), tf.float32) / float(config.total_steps)
            annealed = tf.maximum(annealed * (1.0 - progress), floor)
        return annealed

    def clip_range(self, config: TrainerConfig) -> tf.Tensor:
        """The surrogate's epsilon now: `clip_range` after its `clip_schedule`, held at this copy's floor."""
        return self.annealed(config, config.clip_range, config.clip_schedule, self.clip_floor)

    def objective(self, config: TrainerConfig, feeds: dict[str, tf.Tensor]) -> Objective:
        mean, log_std = self.networks.gaussian(feeds["observations"], config.activation)
        value = mlp_tf(feeds["observations"], self.networks.value, config.activation)[:, 0]
        clip_range = self.clip_range(config)
        entropy_coef = self.annealed(config, config.entropy_coef, config.entropy_schedule)
        return ppo_objective(config, feeds, mean, log_std, value, self.kl_beta, clip_range, entropy_coef)


def local_optimizer(config: TrainerConfig, local: LocalCopy) -> tuple[tf.compat.v1.train.AdamOptimizer, tf.Tensor]:
    """This worker's Adam and its learning rate after the schedule (by the env steps counted so far)."""
    learning_rate = local.annealed(config, config.learning_rate, config.lr_schedule)
    return tf.compat.v1.train.AdamOptimizer(learning_rate, epsilon=config.adam_epsilon), learning_rate


def minibatch_step(
    config: TrainerConfig, local: LocalCopy, optimizer: tf.compat.v1.train.Optimizer, minibatch: dict[str, tf.Tensor]
) -> tuple[tf.Operation, dict[str, tf.Tensor]]:
    """One Adam step on the local copy over `minibatch`, and its metrics by name (`epochs.STEP_METRICS`)."""
    objective = local.objective(config, minibatch)
    weights = local.networks.variables()
    gradients = tf.gradients(objective.loss, weights)
    grad_norm = tf.linalg.global_norm(gradients)
    if config.max_grad_norm is not None:
        gradients, _ = tf.clip_by_global_norm(gradients, config.max_grad_norm, use_norm=grad_norm)
    # The metrics are of the weights before the step: a metric the gradients do not need (the entropy, when
    # it is not in the loss) would otherwise read a weight before or after the step, as it happens.
    with tf.control_dependencies(objective.metrics.values()):
        train_op = optimizer.apply_gradients(zip(gradients, weights, strict=True))
    return train_op, {**objective.metrics, "grad_norm": grad_norm}


def update(config: TrainerConfig, local: LocalCopy, batch: dict[str, tf.Tensor], seed: tf.Tensor) -> dict:
    """The update on the local copy (`epochs.optimize` of `minibatch_step`s with this worker's Adam): the means of
    `epochs.STEP_METRICS` over its minibatches, and the learning rate, clip range and entropy weight after their
    schedules, by name."""
    optimizer, learning_rate = local_optimizer(config, local)
    means = epochs.optimize(config, lambda minibatch: minibatch_step(config, local, optimizer, minibatch), batch, seed)
    clip_range = local.clip_range(config)
    entropy_coef = local.annealed(config, config.entropy_coef, config.entropy_schedule)
    return {**means, "learning_rate": learning_rate, "clip_range": clip_range, "entropy_coef": entropy_coef}
