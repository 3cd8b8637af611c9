"""Milliseconds per gradient step of the learner's update against plain ways to run the same step; one JSON line.

All variants train the preset's networks (same initial weights) with the PPO objective of
`ppo/objective.py` and Adam on the same random batch of the preset's size, in minibatches of the preset's
size, `epochs` passes each:
- learner: `Learner.update`, every step of an update in one session run (a `tf.while_loop` in the graph);
- per_minibatch: the same steps (`learner.minibatch_step`) as one session run per minibatch, fed from
  numpy: how the learner ran its update before;
- tf2_function: eager TensorFlow 2, one `tf.function` call per minibatch (no XLA);
- tf2_function_xla: the same with `jit_compile=True`;
- tf2_epoch_function: one `tf.function` call per epoch, the minibatches looped inside;
- torch: the same networks, loss and Adam in PyTorch, when torch is importable (this project does not
  install it: run this script with a Python that has both, e.g. a venv with this project and torch).
Every variant times the state-independent std's step (`exploration: state_independent`), also for a preset
that explores with gSDE (cheetah, hopper, ant), whose policy step the comparison variants do not implement.
Rounds alternate between the variants (the build machine is shared); each variant's figure is the median
of its rounds, with the range. ratio_* = that variant's median over the learner's: above 1, the learner is
faster.

    .venv/bin/python benchmarks/bench_gradient_step.py --preset cheetah --threads 1 --rounds 5
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import importlib.util
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.trainer import learner as learner_module
from agents_operator.trainer import localcopy
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.learner import Learner, vector_size
from agents_operator.trainer.ppo.networks import mlp_tf
from agents_operator.trainer.ppo.objective import ppo_objective
from agents_operator.trainer.sampling.batch import Batch

Round = Callable[[], float]  # runs one update of `epochs` passes; returns its seconds


def random_batch(learner: Learner, size: int, obs_dim: int, act_dim: int) -> Batch:
    """A batch the learner's initial policy could have acted in, with random advantages."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(size, obs_dim)).astype(np.float32)
    policy = learner.state().policy
    actions, log_probs, means = policy.act(obs, rng.standard_normal((size, act_dim), dtype=np.float32))
    values = policy.value_of(obs).astype(np.float32)
    advantages = rng.normal(size=size).astype(np.float32)
    return Batch(obs, actions, log_probs, means, policy.log_std, values, advantages, values + advantages)


def initial_weights(learner: Learner) -> list[np.ndarray]:
    """The learner's weights in `Networks.variables` order (the order `NumpyPolicy.from_values` reads)."""
    policy = learner.state().policy
    return [
        *(w for layer in policy.policy for w in layer),
        policy.log_std,
        *(w for layer in policy.value for w in layer),
    ]


def learner_round(learner: Learner, batch: Batch) -> Round:
    rng = np.random.default_rng(1)
    return lambda: learner.update(batch, rng)["epochs_seconds"]


def per_minibatch_round(config: TrainerConfig, batch: Batch, weights: list[np.ndarray]) -> Round:
    """One session run per minibatch, the minibatches cut from numpy permutations."""
    with tf.Graph().as_default() as graph:
        feeds = learner_module.placeholders(batch.observations.shape[1], batch.actions.shape[1])
        local = localcopy.LocalCopy.create(config, batch.observations.shape[1], batch.actions.shape[1])
        optimizer, _ = localcopy.local_optimizer(config, local)
        train_op, metrics = localcopy.minibatch_step(config, local, optimizer, feeds)
        assigns = [v.assign(w) for v, w in zip(local.networks.variables(), weights, strict=True)]
        init = tf.compat.v1.global_variables_initializer()
    threads = config.threads
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads
    )
    session = tf.compat.v1.Session(graph=graph, config=session_config)
    session.run(init)
    session.run(assigns)
    rng = np.random.default_rng(1)

    def run() -> float:
        begin = time.perf_counter()
        for rows in _orders(config, len(batch), rng):
            feed = {feeds[name]: getattr(batch, name)[rows] for name in feeds if name != "log_std"}
            session.run([train_op, metrics], {**feed, feeds["log_std"]: batch.log_std})
        return time.perf_counter() - begin

    return run


def _orders(config: TrainerConfig, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The minibatches of one update: per epoch a permutation cut into minibatch_size pieces."""
    step = config.minibatch_size
    return [
        order[start : start + step]
        for order in (rng.permutation(size) for _ in range(config.epochs))
        for start in range(0, size - step + 1, step)
    ]


class _Eager:
    """The networks as eager variables (from the learner's initial weights) and the PPO step on them."""

    def __init__(self, config: TrainerConfig, weights: list[np.ndarray]):
        self.config = config
        self.weights = [tf.Variable(w) for w in weights]
        self.optimizer = tf.compat.v1.train.AdamOptimizer(config.learning_rate, epsilon=config.adam_epsilon)
        self.split = 2 * len(config.policy_layers) + 2  # the policy's kernels and biases; then log_std

    def step(self, minibatch: dict[str, tf.Tensor]) -> tf.Tensor:
        with tf.GradientTape() as tape:
            policy, log_std, value = (
                self.weights[: self.split],
                self.weights[self.split],
                self.weights[self.split + 1 :],
            )
            mean = mlp_tf(
                minibatch["observations"], list(zip(policy[::2], policy[1::2], strict=True)), self.config.activation
            )
            values = mlp_tf(
                minibatch["observations"], list(zip(value[::2], value[1::2], strict=True)), self.config.activation
            )
            objective = ppo_objective(
                self.config,
                minibatch,
                mean,
                log_std,
                values[:, 0],
                tf.constant(1.0),
                self.config.clip_range,
                self.config.entropy_coef,
            )
        gradients = tape.gradient(objective.loss, self.weights)
        if self.config.max_grad_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, self.config.max_grad_norm)
        self.optimizer.apply_gradients(zip(gradients, self.weights, strict=True))
        return objective.loss


def tf2_round(config: TrainerConfig, batch: Batch, weights: list[np.ndarray], jit: bool) -> Round:
    eager = _Eager(config, weights)
    step = tf.function(eager.step, jit_compile=jit)
    data = {name: tf.constant(getattr(batch, name)) for name in Batch.__dataclass_fields__}
    rng = np.random.default_rng(1)

    def run() -> float:
        begin = time.perf_counter()
        for rows in _orders(config, len(batch), rng):
            rows = tf.constant(rows)
            step({name: v if name == "log_std" else tf.gather(v, rows) for name, v in data.items()})
        return time.perf_counter() - begin

    return run


def tf2_epoch_round(config: TrainerConfig, batch: Batch, weights: list[np.ndarray]) -> Round:
    eager = _Eager(config, weights)
    data = {name: tf.constant(getattr(batch, name)) for name in Batch.__dataclass_fields__}

    @tf.function
    def epoch(order: tf.Tensor) -> None:
        for rows in order:
            eager.step({name: v if name == "log_std" else tf.gather(v, rows) for name, v in data.items()})

    rng = np.random.default_rng(1)
    per_epoch = config.minibatches

    def run() -> float:
        orders = np.stack(_orders(config, len(batch), rng))
        begin = time.perf_counter()
        for first in range(0, len(orders), per_epoch):
            epoch(tf.constant(orders[first : first + per_epoch]))
        return time.perf_counter() - begin

    return run


def torch_round(config: TrainerConfig, batch: Batch, weights: list[np.ndarray]) -> Round:
    """The same step in PyTorch: clipped surrogate, squared value error, Adam, gradient-norm clipping."""
    import torch  # optional: not a dependency of this project

    torch.set_num_threads(config.threads)
    params = [torch.tensor(w.T.copy() if w.ndim == 2 else w, requires_grad=True) for w in weights]
    split = 2 * len(config.policy_layers) + 2  # the policy's kernels and biases; then log_std
    act = torch.tanh if config.activation == "tanh" else torch.relu

    def mlp(x, layers):
        for i in range(0, len(layers), 2):
            x = torch.nn.functional.linear(x, layers[i], layers[i + 1])
            x = act(x) if i < len(layers) - 2 else x
        return x

    optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_epsilon)
    data = {name: torch.from_numpy(getattr(batch, name)) for name in Batch.__dataclass_fields__}
    rng = np.random.default_rng(1)

    def step(rows: torch.Tensor) -> None:
        obs, log_std = data["observations"][rows], params[split]
        mean = mlp(obs, params[:split])
        log_prob = (-0.5 * ((data["actions"][rows] - mean) / log_std.exp()) ** 2 - log_std).sum(-1)
        ratio = (log_prob - 0.5 * log_std.numel() * np.log(2 * np.pi) - data["log_probs"][rows]).exp()
        adv = data["advantages"][rows]
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
        clipped = ratio.clamp(1 - config.clip_range, 1 + config.clip_range)
        pg_loss = torch.max(-adv * ratio, -adv * clipped).mean()
        v_loss = 0.5 * ((mlp(obs, params[split + 1 :])[:, 0] - data["returns"][rows]) ** 2).mean()
        optimizer.zero_grad()
        (pg_loss + config.value_coef * v_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or float("inf"))
        optimizer.step()

    def run() -> float:
        begin = time.perf_counter()
        for rows in _orders(config, len(batch), rng):
            step(torch.from_numpy(rows))
        return time.perf_counter() - begin

    return run


def measure(config: TrainerConfig, rounds: int) -> dict[str, object]:
    env = make_env(config.env_id)
    obs_dim, act_dim = vector_size(env.observation_space.shape), vector_size(env.action_space.shape)
    env.close()
    learner = Learner(config, obs_dim, act_dim)
    learner.initialize()
    weights = initial_weights(learner)
    batch = random_batch(learner, config.batch_size, obs_dim, act_dim)
    variants: dict[str, Round] = {
        "learner": learner_round(learner, batch),
        "per_minibatch": per_minibatch_round(config, batch, weights),
        "tf2_function": tf2_round(config, batch, weights, jit=False),
        "tf2_function_xla": tf2_round(config, batch, weights, jit=True),
        "tf2_epoch_function": tf2_epoch_round(config, batch, weights),
    }
    if importlib.util.find_spec("torch") is not None:
        variants["torch"] = torch_round(config, batch, weights)
    steps = config.epochs * config.minibatches
    for run in variants.values():
        run()  # warm-up: traces, compiles, first allocations
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            seconds[name].append(run())
    learner.close()
    ms = {name: [1000 * s / steps for s in values] for name, values in seconds.items()}
    medians = {name: statistics.median(values) for name, values in ms.items()}
    result: dict[str, object] = {"steps_per_update": steps, "minibatch_size": config.minibatch_size}
    result["ms_per_step"] = {name: round(m, 2) for name, m in medians.items()}
    result["ms_range"] = {name: [round(min(v), 2), round(max(v), 2)] for name, v in ms.items()}
    result |= {f"ratio_{name}": round(m / medians["learner"], 2) for name, m in medians.items() if name != "learner"}
    return result


def timed_config(preset: str, overrides: dict[str, object]) -> TrainerConfig:
    """The `preset` (with `overrides`) as every variant times it: serial, since the batch here has no proximal
    log-probabilities (`sampling.overlapped`), and with the state-independent std, the only one the comparison
    variants implement, also for a preset that explores with gSDE."""
    timed = {"overlap": False, "exploration": "state_independent", "exploration_hold": 1}
    return presets.resolve(preset, {**overrides, **timed})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cheetah", help="whose networks, batch and minibatch sizes")
    parser.add_argument(
        "--threads", type=int, default=None, help="TensorFlow (and torch) threads; default: the preset's"
    )
    parser.add_argument("--rounds", type=int, default=5, help="updates per variant, alternating")
    args = parser.parse_args()
    config = timed_config(args.preset, {} if args.threads is None else {"threads": args.threads})
    tf.config.threading.set_intra_op_parallelism_threads(config.threads)
    tf.config.threading.set_inter_op_parallelism_threads(config.threads)
    record = {
        "preset": args.preset,
        "threads": config.threads,
        "exploration": config.exploration,
        "load": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(record | measure(config, args.rounds)))


if __name__ == "__main__":
    main()
