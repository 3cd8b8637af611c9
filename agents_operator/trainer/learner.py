"""The PPO learner: one TensorFlow graph (tf.compat.v1 graph mode) and the session that runs it.

Everything that is state lives in TF variables created by `build_graph`: the network weights, Adam's
slots, the global step, the environment-step and iteration counters, BatchPPO's KL penalty coefficient
and the normaliser statistics. `build_graph` takes a device setter (None locally;
`tf.compat.v1.train.replica_device_setter(...)` in the distributed trainer), so the same graph places its
variables on parameter servers and its ops on the worker. A checkpoint of those variables is the whole
training state.

Per iteration the session runs a pull of the shared weights into the local copy, one Adam step per
minibatch, a push of the change, and `finish_iteration` (counters, normaliser sums, KL penalty, and a
read of every weight for the numpy actor). Acting never runs it.
The graph lives in its own `tf.Graph`, which is graph mode whether or not eager execution is enabled in
the process, so tests and tools can build learners side by side.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import distributed
from agents_operator.trainer.checkpoints import CheckpointError
from agents_operator.trainer.normalize import Moments
from agents_operator.trainer.ppo import losses
from agents_operator.trainer.ppo.networks import Networks, mlp_tf
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.batch import Batch


@dataclass
class LearnerState:
    """What the rest of the trainer needs from the variables, read in one session run."""

    policy: NumpyPolicy
    observation_moments: Moments
    return_moments: Moments
    global_step: int
    env_steps: int
    iterations: int
    kl_beta: float


@dataclass
class _Graph:
    feeds: dict[str, tf.Tensor]
    networks: Networks  # the shared weights (on the ps tasks in a cluster)
    pull: tf.Operation
    train_op: tf.Operation
    train_metrics: dict[str, tf.Tensor]
    push: tf.Operation
    finish_feeds: dict[str, tf.Tensor]
    finish_metrics: dict[str, tf.Tensor]
    state_variables: list[tf.Variable]
    state_after_finish: list[tf.Tensor]
    shared_variables: list[tf.Variable]
    local_variables: list[tf.Variable]
    sync_optimizer: tf.compat.v1.train.SyncReplicasOptimizer | None


def build_graph(
    config: TrainerConfig,
    obs_dim: int,
    act_dim: int,
    device_setter: Any = None,
    worker_device: str | None = None,
    sync_replicas: int = 0,
) -> _Graph:
    """Create all variables and ops of the learner in the current default graph.

    The state of the run (weights, counters, KL penalty, normaliser sums) is created under `device_setter`
    (on the ps tasks in a cluster). The PPO epochs run on a local copy of the weights under
    `worker_device`, with this worker's own Adam: an iteration reads the shared weights once (`pull`) and
    writes its change once (`push`), so a worker talks to the parameter servers a few times per iteration,
    not once per minibatch. With `sync_replicas` > 1 the push waits until every worker has pushed and
    applies the mean of their changes once (synchronous updates); otherwise each push applies its own.
    """

    def shared_scope():
        return tf.compat.v1.device(device_setter) if device_setter is not None else contextlib.nullcontext()

    def local_scope():
        return tf.compat.v1.device(worker_device) if worker_device else contextlib.nullcontext()

    return _build(config, obs_dim, act_dim, shared_scope, local_scope, sync_replicas)


def _build(config: TrainerConfig, obs_dim: int, act_dim: int, shared_scope, local_scope, sync_replicas: int) -> _Graph:
    v1 = tf.compat.v1
    feeds = {
        "observations": v1.placeholder(tf.float32, [None, obs_dim], "observations"),
        "actions": v1.placeholder(tf.float32, [None, act_dim], "actions"),
        "log_probs": v1.placeholder(tf.float32, [None], "old_log_probs"),
        "means": v1.placeholder(tf.float32, [None, act_dim], "old_means"),
        "log_std": v1.placeholder(tf.float32, [act_dim], "old_log_std"),
        "values": v1.placeholder(tf.float32, [None], "old_values"),
        "advantages": v1.placeholder(tf.float32, [None], "advantages"),
        "returns": v1.placeholder(tf.float32, [None], "returns"),
    }

    def counter(name: str, dtype: tf.DType, shape: list[int], init: float = 0) -> tf.Variable:
        initializer = v1.constant_initializer(dtype.as_numpy_dtype(init))
        return v1.get_variable(name, shape, dtype, initializer=initializer, trainable=False, use_resource=True)

    # --- the run's state, shared by all workers --------------------------------------------------------
    with shared_scope():
        networks = Networks.create(obs_dim, act_dim, config)
        global_step = v1.train.get_or_create_global_step()
        env_steps = counter("env_steps", tf.int64, [])
        iterations = counter("iterations", tf.int64, [])
        kl_beta = counter("kl_beta", tf.float32, [], config.kl_init_penalty)
        statistics = {
            name: counter(f"normalizer/{name}", tf.float64, shape)
            for name, shape in [
                ("observation_count", []),
                ("observation_sum", [obs_dim]),
                ("observation_sumsq", [obs_dim]),
                ("return_count", []),
                ("return_sum", []),
                ("return_sumsq", []),
            ]
        }
    shared_variables = list(v1.global_variables())

    # --- this worker's copy: what the PPO epochs update -----------------------------------------------
    with local_scope(), v1.variable_scope("local"):
        local = Networks.create(obs_dim, act_dim, config)
        with v1.variable_scope("anchor"):
            anchor = Networks.create(obs_dim, act_dim, config)  # the shared weights this iteration started from
        local_env_steps = counter("env_steps", tf.int64, [])
        local_kl_beta = counter("kl_beta", tf.float32, [], config.kl_init_penalty)
    weights, local_weights, anchor_weights = networks.variables(), local.variables(), anchor.variables()
    pull = tf.group(
        *(w.assign(s) for s, w in zip(weights, local_weights, strict=True)),
        *(a.assign(s) for s, a in zip(weights, anchor_weights, strict=True)),
        local_env_steps.assign(env_steps),
        local_kl_beta.assign(kl_beta),
        name="pull",
    )

    # --- the PPO objective, on the local copy ---------------------------------------------------------
    with local_scope():
        mean = mlp_tf(feeds["observations"], local.policy, config.activation)
        value = mlp_tf(feeds["observations"], local.value, config.activation)[:, 0]
        log_std = local.log_std
        new_log_probs = losses.gaussian_log_prob(feeds["actions"], mean, log_std)
        log_ratio = new_log_probs - feeds["log_probs"]
        ratio = tf.exp(log_ratio)
        kl = losses.gaussian_kl(feeds["means"], feeds["log_std"], mean, log_std)
        advantages = feeds["advantages"]
        if config.normalize_advantages:
            adv_mean, adv_var = tf.nn.moments(advantages, axes=[0])
            advantages = (advantages - adv_mean) / (tf.sqrt(adv_var) + 1e-8)
        pg_loss, clipfrac = losses.clipped_surrogate(ratio, advantages, config.clip_range)
        if config.objective == "kl_penalty":
            pg_loss = losses.kl_penalty(
                ratio,
                advantages,
                kl,
                local_kl_beta,
                config.kl_target,
                config.kl_cutoff_factor,
                config.kl_cutoff_coef,
            )
        v_loss = losses.value_loss(value, feeds["values"], feeds["returns"], config.value_clip)
        entropy = losses.gaussian_entropy(log_std)
        loss = pg_loss + config.value_coef * v_loss - config.entropy_coef * entropy

        learning_rate = tf.constant(config.learning_rate)
        if config.lr_schedule == "linear":
            progress = tf.cast(local_env_steps.read_value(), tf.float32) / float(config.total_steps)
            learning_rate = learning_rate * tf.maximum(1.0 - progress, 0.0)
        optimizer = v1.train.AdamOptimizer(learning_rate, epsilon=config.adam_epsilon)
        gradients = tf.gradients(loss, local_weights)
        grad_norm = tf.linalg.global_norm(gradients)
        if config.max_grad_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, config.max_grad_norm, use_norm=grad_norm)
        train_op = optimizer.apply_gradients(zip(gradients, local_weights, strict=True))
    train_metrics = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": losses.approx_kl(log_ratio),
        "clipfrac": clipfrac,
        "grad_norm": grad_norm,
        "learning_rate": learning_rate,
    }

    # --- once per iteration: this worker's change to the shared weights --------------------------------
    sync_optimizer = None
    with local_scope():
        # The negated change serves as a gradient for plain SGD with step size 1: weights += change.
        pseudo_gradients = [a - w for a, w in zip(anchor_weights, local_weights, strict=True)]
    if sync_replicas > 1:
        with shared_scope():
            sync_optimizer = v1.train.SyncReplicasOptimizer(
                v1.train.GradientDescentOptimizer(1.0),
                replicas_to_aggregate=sync_replicas,
                total_num_replicas=sync_replicas,
            )
            push = sync_optimizer.apply_gradients(zip(pseudo_gradients, weights, strict=True), global_step=global_step)
    else:
        push = tf.group(
            *(s.assign_sub(g) for s, g in zip(weights, pseudo_gradients, strict=True)),
            global_step.assign_add(1),
            name="push",
        )

    finish_feeds = {
        "env_steps": v1.placeholder(tf.int64, [], "new_env_steps"),
        **{name: v1.placeholder(tf.float64, var.shape, f"new_{name}") for name, var in statistics.items()},
    }
    mean_kl = tf.reduce_mean(kl)
    updates = [
        env_steps.assign_add(finish_feeds["env_steps"]),
        iterations.assign_add(1),
        *(var.assign_add(finish_feeds[name]) for name, var in statistics.items()),
    ]
    if config.objective == "kl_penalty":
        updates.append(kl_beta.assign(losses.adapted_kl_beta(kl_beta, mean_kl, config.kl_target)))
    state_variables = [
        *weights,
        *statistics.values(),
        global_step,
        env_steps,
        iterations,
        kl_beta,
    ]
    with tf.control_dependencies(updates):
        state_after_finish = [var.read_value() for var in state_variables]
    local_variables = [v for v in v1.global_variables() if all(v is not s for s in shared_variables)]
    return _Graph(
        feeds=feeds,
        networks=networks,
        pull=pull,
        train_op=train_op,
        train_metrics=train_metrics,
        push=push,
        finish_feeds=finish_feeds,
        finish_metrics={"kl": mean_kl},
        state_variables=state_variables,
        state_after_finish=state_after_finish,
        shared_variables=shared_variables,
        local_variables=local_variables,
        sync_optimizer=sync_optimizer,
    )


@dataclass
class _SyncOps:
    """What `SyncReplicasOptimizer`'s session hook does, for a plain session (no MonitoredSession: its
    hard-coded 30 s recovery wait makes every start-up and recovery slow)."""

    ready: tf.Tensor
    local_init: tf.Operation
    queue_runner: tf.compat.v1.train.QueueRunner | None
    coordinator: tf.train.Coordinator | None = None

    @classmethod
    def create(cls, optimizer: tf.compat.v1.train.SyncReplicasOptimizer, chief: bool) -> _SyncOps:
        return cls(
            ready=optimizer.ready_for_local_init_op,
            local_init=optimizer.chief_init_op if chief else optimizer.local_step_init_op,
            queue_runner=optimizer.get_chief_queue_runner() if chief else None,
        )

    def start(self, session: tf.compat.v1.Session, chief: bool) -> None:
        while len(session.run(self.ready)):
            time.sleep(distributed.READY_POLL_SECONDS)
        session.run(self.local_init)
        if chief:
            self.coordinator = tf.train.Coordinator()
            self.queue_runner.create_threads(session, coord=self.coordinator, daemon=True, start=True)


class Learner:
    """A session over `build_graph`'s graph: update from batches, save and restore the whole state.

    With a `cluster` (and the `target` of this worker's server) the variables live on the ps tasks and the
    learner takes part in the cluster protocols of `distributed`: `join` before training, `reconnect`
    after losing a ps, `finish` when done.
    """

    def __init__(
        self,
        config: TrainerConfig,
        obs_dim: int,
        act_dim: int,
        cluster: distributed.Cluster | None = None,
        target: str = "",
    ):
        self.config = config
        self.cluster = cluster
        self.target = target
        self.graph = tf.Graph()
        chief = cluster is None or cluster.is_chief
        with self.graph.as_default():
            # Weight initialisation (and so a whole single-process run) is reproducible from config.seed.
            tf.compat.v1.set_random_seed(config.seed)
            setter = cluster.device_setter() if cluster else None
            sync = cluster.num_workers if cluster and config.mode == "sync" else 0
            self._g = build_graph(config, obs_dim, act_dim, setter, cluster.device if cluster else None, sync)
            v1 = tf.compat.v1
            self._init_shared = v1.variables_initializer(self._g.shared_variables)
            self._init_local = v1.variables_initializer(self._g.local_variables)
            # Checkpoints hold the shared state only (a worker's Adam moments start afresh on resume); this
            # process writes and reads them on its own file system.
            with v1.device(cluster.device) if cluster else contextlib.nullcontext():
                self._saver = v1.train.Saver(self._g.shared_variables, max_to_keep=None, save_relative_paths=True)
                if cluster is not None:
                    self._uninitialized = v1.report_uninitialized_variables(self._g.shared_variables)
                self._done = distributed.done_ops(cluster) if cluster else []
            self._sync = _SyncOps.create(self._g.sync_optimizer, chief) if self._g.sync_optimizer else None
        self.graph.finalize()
        self._coordinator: tf.train.Coordinator | None = None
        self.session: tf.compat.v1.Session | None = self._open_session()

    def _session_config(self) -> tf.compat.v1.ConfigProto:
        threads = self.config.threads
        if self.cluster is not None:
            return self.cluster.session_config(threads)
        return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)

    def _open_session(self) -> tf.compat.v1.Session:
        return tf.compat.v1.Session(self.target, graph=self.graph, config=self._session_config())

    def join(self, initialize: Callable[[], object]) -> None:
        """Make the shared variables usable (the chief calls `initialize` when some are not) and, in sync
        mode, set up the gradient aggregation (the chief runs its queue runner)."""
        assert self.cluster is not None
        distributed.prepare_session(self.session, self._uninitialized, initialize, self.cluster.is_chief)
        self._reset_local()
        if self._sync is not None:
            self._sync.start(self.session, self.cluster.is_chief)
            self._coordinator = self._sync.coordinator

    def reconnect(self, initialize: Callable[[], object]) -> None:
        """After a ps was lost: a new session once every ps answers again, then `join` again."""
        assert self.cluster is not None
        self._close_session()
        for name, address in self.cluster.peers():
            distributed.wait_for(name, address)
        self.session = self._open_session()
        self.join(initialize)

    def finish(self) -> None:
        """Tell every ps that this worker is done (a ps exits once all workers are); the learner is closed.

        The training session is closed first, while the ps tasks still run: in sync mode the chief's queue
        runner waits on a ps for gradients that will not come, and closing a session after that ps has
        exited would wait for the call forever. The tokens go out through a session of their own.
        """
        self._close_session()
        if self._done:
            with tf.compat.v1.Session(self.target, graph=self.graph, config=self._session_config()) as session:
                session.run(self._done)

    def initialize(self) -> LearnerState:
        """Fresh shared state (the chief, or a single process) and a fresh local copy."""
        self.session.run(self._init_shared)
        self._reset_local()
        return self.state()

    def _reset_local(self) -> None:
        """A fresh local copy (and Adam) that starts from the shared weights."""
        self.session.run(self._init_local)
        self.session.run(self._g.pull)

    def state(self) -> LearnerState:
        return self._unpack(self.session.run(self._g.state_variables))

    def update(self, batch: Batch, rng: np.random.Generator) -> dict[str, float]:
        """`epochs` passes of minibatch Adam steps over `batch` on the local copy of the shared weights,
        then one push of the change; metrics averaged over all minibatches, plus the seconds spent with
        the shared variables (`ps_seconds`: pull and push, which in sync mode waits for every worker) and
        on the local epochs (`epochs_seconds`)."""
        begin = time.perf_counter()
        self.session.run(self._g.pull)
        pulled = time.perf_counter()
        size = self.config.minibatch_size
        fetches = [self._g.train_op, self._g.train_metrics]
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(self.config.epochs):
            order = rng.permutation(len(batch))
            for start in range(0, len(batch) - size + 1, size):
                _, metrics = self.session.run(fetches, self._feed(batch, order[start : start + size]))
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + float(value)
                steps += 1
        trained = time.perf_counter()
        self.session.run(self._g.push)
        timings = {"ps_seconds": pulled - begin + time.perf_counter() - trained, "epochs_seconds": trained - pulled}
        return {**{key: total / steps for key, total in totals.items()}, **timings}

    def finish_iteration(
        self, batch: Batch, env_steps: int, observation_moments: Moments, return_moments: Moments
    ) -> tuple[LearnerState, dict[str, float]]:
        """Count the iteration, push this worker's normaliser sums, adapt the KL penalty, read the state.

        Returns the new state and the exact KL between the acting and the updated policy on `batch`.
        """
        g = self._g
        feed = self._feed(batch, slice(None))
        feed[g.finish_feeds["env_steps"]] = env_steps
        for prefix, moments in [("observation", observation_moments), ("return", return_moments)]:
            feed[g.finish_feeds[f"{prefix}_count"]] = moments.count
            feed[g.finish_feeds[f"{prefix}_sum"]] = moments.sum
            feed[g.finish_feeds[f"{prefix}_sumsq"]] = moments.sumsq
        begin = time.perf_counter()
        values, metrics = self.session.run([g.state_after_finish, g.finish_metrics], feed)
        finished = {key: float(value) for key, value in metrics.items()}
        return self._unpack(values), {**finished, "finish_seconds": time.perf_counter() - begin}

    def save(self, prefix: str) -> None:
        with self.graph.as_default():  # the Saver checks the mode at call time
            self._saver.save(self.session, prefix, write_meta_graph=False, write_state=False)

    def restore(self, prefix: str) -> LearnerState:
        """The state saved at `prefix`; CheckpointError says why it cannot be restored."""
        try:
            self._check_shapes(prefix)
            with self.graph.as_default():
                self._saver.restore(self.session, prefix)
            self._reset_local()
        except (tf.errors.OpError, ValueError) as error:
            raise CheckpointError(distributed.first_line(error)) from error
        return self.state()

    def _check_shapes(self, prefix: str) -> None:
        """Compare the checkpoint's variables with this graph's before restoring: the Saver would assign a
        variable of another shape (the network settings changed) and fail only at the next use, by op name."""
        saved = tf.compat.v1.train.NewCheckpointReader(prefix).get_variable_to_shape_map()
        wanted = {v.op.name: v.shape.as_list() for v in self._g.shared_variables}
        missing = sorted(set(wanted) - set(saved))
        if missing:
            raise CheckpointError(f"variables missing from the checkpoint: {', '.join(missing)}")
        for name, shape in wanted.items():
            if list(saved[name]) != shape:
                raise CheckpointError(
                    f"variable {name} has shape {list(saved[name])} in the checkpoint but {shape} in this graph "
                    f"(were the network settings changed?)"
                )

    def close(self) -> None:
        self._close_session()

    def _close_session(self) -> None:
        """Stop the queue runner (sync chief) and close the session; safe to repeat."""
        if self._coordinator is not None:
            self._coordinator.request_stop()
            self._coordinator = None
        if self.session is not None:
            self.session.close()
            self.session = None

    def _feed(self, batch: Batch, index: Any) -> dict[tf.Tensor, np.ndarray]:
        feeds = self._g.feeds
        return {
            feeds["observations"]: batch.observations[index],
            feeds["actions"]: batch.actions[index],
            feeds["log_probs"]: batch.log_probs[index],
            feeds["means"]: batch.means[index],
            feeds["log_std"]: batch.log_std,
            feeds["values"]: batch.values[index],
            feeds["advantages"]: batch.advantages[index],
            feeds["returns"]: batch.returns[index],
        }

    def _unpack(self, values: list[np.ndarray]) -> LearnerState:
        num_weights = len(self._g.networks.variables())
        weights, rest = values[:num_weights], values[num_weights:]
        obs_count, obs_sum, obs_sumsq, ret_count, ret_sum, ret_sumsq, global_step, env_steps, iterations, beta = rest
        policy = NumpyPolicy.from_values(weights, len(self._g.networks.policy), self.config.activation)
        return LearnerState(
            policy=policy,
            observation_moments=Moments(float(obs_count), obs_sum, obs_sumsq),
            return_moments=Moments(float(ret_count), np.asarray(ret_sum), np.asarray(ret_sumsq)),
            global_step=int(global_step),
            env_steps=int(env_steps),
            iterations=int(iterations),
            kl_beta=float(beta),
        )


def vector_size(shape: tuple[int, ...]) -> int:
    """The size of a vector observation or action; the MLP policy takes neither images nor scalars."""
    if len(shape) != 1:
        raise ValueError(f"spaces of shape {shape} are not supported: the policy is an MLP over vectors")
    return int(shape[0])
