"""The PPO learner: one TensorFlow graph (tf.compat.v1 graph mode) and the session that runs it.

Everything that is state lives in TF variables created by `build_graph`: the network weights, Adam's slots, the
global step, the environment-step and iteration counters, BatchPPO's KL penalty coefficient and the normaliser
statistics. `build_graph` takes a device setter (None locally; `tf.compat.v1.train.replica_device_setter(...)`
in the distributed trainer), so the same graph places its variables on parameter servers and its ops on the
worker. A checkpoint of those variables is the whole training state.

Per iteration (`iteration.iterate` calls `update`, then `finish_iteration`) the session runs a pull of the shared
weights into the local copy, the update (every epoch's minibatch Adam steps in one session run: `ppo.epochs`, a
`tf.while_loop` over the batch, fed once, shuffled in the graph), a push of the change (`replicas`), and
`finish_iteration` (counters, normaliser sums, KL penalty, and a read of every weight for the numpy actor).
Acting never runs it. The graph lives in its own `tf.Graph`, which is graph mode whether or not eager
execution is enabled in the process, so tests and tools can build learners side by side.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import distributed, localcopy, replicas, syncupdates, updateturn
from agents_operator.trainer.checkpoints import CheckpointError
from agents_operator.trainer.ppo.networks import Networks
from agents_operator.trainer.ppo.normalize import Moments
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.batch import Batch, Revaluing

log = logging.getLogger(__name__)


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
    feeds: dict[str, tf.Tensor]  # the iteration's whole batch, by `Batch` field
    update_seed: tf.Tensor  # (2,) int64: the seed of the update's minibatch order
    networks: Networks  # the shared weights (on the ps tasks in a cluster)
    pull: tf.Operation
    pulled: list[tf.Variable]  # the local copy's weights, which `pull` sets to the shared ones
    update: dict[str, tf.Tensor]  # the update's metrics by name; fetching them runs the whole update
    push: tf.Operation
    finite: tf.Tensor  # whether the change the push sends is finite (else it sends none: `replicas.Changes`)
    staleness: tf.Tensor | None  # async: the staleness the push read (`replicas.push`)
    finish_feeds: dict[str, tf.Tensor]
    finish_metrics: dict[str, tf.Tensor]
    state: dict[str, Any]  # the variables of `LearnerState` by name (`replicas.Shared.state`)
    state_after_finish: dict[str, Any]  # their values read after `finish_iteration`, by the same names
    shared_variables: list[tf.Variable]
    local_variables: list[tf.Variable]
    sync: syncupdates.SyncUpdates | None  # sync mode: `push` puts the change into its queue


def build_graph(
    config: TrainerConfig,
    obs_dim: int,
    act_dim: int,
    device_setter: Any = None,
    worker_device: str | None = None,
    sync: syncupdates.Placement | None = None,
    anchored: bool = False,
) -> _Graph:
    """Create all variables and ops of the learner in the current default graph.

    The state of the run (weights, counters, KL penalty, normaliser sums) is created under `device_setter`
    (on the ps tasks in a cluster). The PPO epochs run on a local copy of the weights under
    `worker_device`, with this worker's own Adam: an iteration reads the shared weights once (`pull`) and
    writes its change once (`push`), so a worker talks to the parameter servers a few times per iteration,
    not once per minibatch. With `sync` the push goes to the synchronous updates of `syncupdates` (each update
    the mean of the first changes for it); otherwise each push applies its own. `anchored`: the update's
    clip is taken around the weights it pulled (`localcopy.LocalCopy.anchored`), for workers whose pull may differ from
    the policy that acted (async workers in a cluster).
    """

    def shared_scope():
        return tf.compat.v1.device(device_setter) if device_setter is not None else contextlib.nullcontext()

    def local_scope():
        return tf.compat.v1.device(worker_device) if worker_device else contextlib.nullcontext()

    return _build(config, obs_dim, act_dim, shared_scope, local_scope, sync, anchored)


def placeholders(
    obs_dim: int, act_dim: int, overlap: bool = False, state_dependent: bool = False
) -> dict[str, tf.Tensor]:
    """What a batch feeds, by the name of its `Batch` field (overlapped: `proximal_log_probs` too, unless the
    graph computes them: `anchored`; with a state-dependent std, the acting policy's `log_std` per sample)."""
    v1 = tf.compat.v1
    feeds = {
        "observations": v1.placeholder(tf.float32, [None, obs_dim], "observations"),
        "actions": v1.placeholder(tf.float32, [None, act_dim], "actions"),
        "log_probs": v1.placeholder(tf.float32, [None], "old_log_probs"),
        "means": v1.placeholder(tf.float32, [None, act_dim], "old_means"),
        "log_std": v1.placeholder(tf.float32, [None, act_dim] if state_dependent else [act_dim], "old_log_std"),
        "values": v1.placeholder(tf.float32, [None], "old_values"),
        "advantages": v1.placeholder(tf.float32, [None], "advantages"),
        "returns": v1.placeholder(tf.float32, [None], "returns"),
    }
    if overlap:
        feeds["proximal_log_probs"] = v1.placeholder(tf.float32, [None], "proximal_log_probs")
    return feeds


def _build(config: TrainerConfig, obs_dim: int, act_dim: int, shared_scope, local_scope, sync, anchored) -> _Graph:
    """`build_graph` with its device scopes made. The variables are created first, in a fixed order, so that
    their initial values depend only on the seed."""
    v1 = tf.compat.v1
    state_dependent = config.exploration == "state_dependent"
    feeds = placeholders(obs_dim, act_dim, config.overlap and not anchored, state_dependent)
    update_seed = v1.placeholder(tf.int64, [2], "update_seed")
    with shared_scope():
        shared = replicas.Shared.create(config, obs_dim, act_dim)
    shared_variables = list(v1.global_variables())
    with local_scope():
        local = localcopy.LocalCopy.create(config, obs_dim, act_dim, anchored)
    pull = local.pull(shared)
    with local_scope():
        update = localcopy.update(config, local, local.anchored(config, feeds) if anchored else feeds, update_seed)
        kl = local.objective(config, feeds).kl
    changes = replicas.changes(local.anchor.variables(), local.networks.variables(), local_scope)
    shared_weights, global_step = shared.networks.variables(), shared.counters["global_step"]
    updates = syncupdates.SyncUpdates.create(shared_weights, changes.deltas, global_step, sync) if sync else None
    pushed = None if updates else replicas.push(shared, changes.deltas, local.pulled_step)
    finish_feeds, finish_metrics, state_after_finish = replicas.finish(config, shared, kl)
    return _Graph(
        feeds=feeds,
        update_seed=update_seed,
        networks=shared.networks,
        pull=pull,
        pulled=local.networks.variables(),
        update=update,
        push=updates.push if updates else pushed.op,
        finite=changes.finite,
        staleness=None if updates else pushed.staleness,
        finish_feeds=finish_feeds,
        finish_metrics=finish_metrics,
        state=shared.state(),
        state_after_finish=state_after_finish,
        shared_variables=shared_variables,
        local_variables=[v for v in v1.global_variables() if all(v is not s for s in shared_variables)],
        sync=updates,
    )


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
        self.anchored = cluster is not None and config.mode == "async"
        """Other workers may push between this worker's read of the state and its pull: the update is clipped
        around the weights it pulled (`localcopy.LocalCopy.anchored`), and the worker does not overlap its sampling."""
        self.graph = tf.Graph()
        with self.graph.as_default():
            # Weight initialisation (and so a whole single-process run) is reproducible from config.seed.
            tf.compat.v1.set_random_seed(config.seed)
            setter = cluster.device_setter() if cluster else None
            self.membership = distributed.Membership.create(cluster) if cluster else None
            sync = None
            if cluster and config.mode == "sync" and cluster.num_workers > 1:
                slots, worker = cluster.num_workers, cluster.tf_config.task_index
                aggregated = config.aggregated_changes(slots)
                sync = syncupdates.Placement(worker, slots, aggregated, members=self.membership.flags)
            device = cluster.device if cluster else None
            self._g = build_graph(config, obs_dim, act_dim, setter, device, sync, self.anchored)
            in_turn = self.anchored and config.async_updates == "in_turn"
            self.turn = updateturn.UpdateTurn.create(cluster) if in_turn else None
            """Async updates in turn: the turn this worker takes before each pull and gives back after the push."""
            self.revalues = self.turn is not None and config.overlap_values == "recomputed"
            """GAE's values are to be computed by the weights the update pulls (`update` of a `Revaluing`)."""
            v1 = tf.compat.v1
            self._init_shared = v1.variables_initializer(self._g.shared_variables)
            self._init_local = v1.variables_initializer(self._g.local_variables)
            # Checkpoints hold the shared state only (a worker's Adam moments start afresh on resume); this
            # process writes and reads them on its own file system.
            with v1.device(cluster.device) if cluster else contextlib.nullcontext():
                self._saver = v1.train.Saver(self._g.shared_variables, max_to_keep=None, save_relative_paths=True)
                if cluster is not None:
                    self._uninitialized = v1.report_uninitialized_variables(self._g.shared_variables)
        self.graph.finalize()
        self.aggregator: syncupdates.Aggregator | None = None
        """The chief's in sync mode: the thread that applies the synchronous updates."""
        self.discarded_updates = 0
        """This process's updates whose change was not finite: each was pushed as no change."""
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
        mode, have the chief apply the synchronous updates (`syncupdates.Aggregator`)."""
        assert self.cluster is not None
        chief = self.cluster.is_chief
        fresh = distributed.prepare_session(self.session, self._uninitialized, initialize, chief)
        self.membership.enter(self.session, chief)
        if self.turn is not None:
            self.turn.join(self.session, chief, self.cluster.worker_gone)
        self._reset_local()
        if self._g.sync is not None and chief:
            self._g.sync.initialize(self.session, fresh)
            self.aggregator = syncupdates.Aggregator(self.session, self._g.sync)

    def reconnect(self, initialize: Callable[[], object]) -> None:
        """After a ps was lost: a new session once every ps answers again, then `join` again."""
        assert self.cluster is not None
        self._close_session()
        for name, address in self.cluster.peers():
            distributed.wait_for(name, address)
        self.session = self._open_session()
        self.join(initialize)

    def release_waiting(self) -> None:
        """The sync chief, after the job's last step: no worker is to wait for another (`SyncUpdates.release`)."""
        if self._g.sync is not None:
            self.session.run(self._g.sync.release)

    def finish(self) -> None:
        """Give this worker's slot back; the chief, which leaves last, also tells every ps that the job is over
        (a ps exits then), through a session of its own: the training session is closed first, while the ps
        tasks still run (in sync mode the chief's aggregator waits on ps 0 for changes that will not come, and
        closing a session after that ps has exited would wait for the call forever)."""
        if self.membership is not None:
            self.membership.give_back(self.session, self._g.sync.wake if self._g.sync else None)
        self._close_session()
        if self.membership is not None and self.membership.done:
            with tf.compat.v1.Session(self.target, graph=self.graph, config=self._session_config()) as session:
                session.run(self.membership.done)

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
        return self._unpack(self.session.run(self._g.state))

    def update(self, batch: Batch | Revaluing, rng: np.random.Generator) -> dict[str, float]:
        """`epochs` passes of minibatch Adam steps over `batch` on the local copy of the shared weights (one
        session run, the minibatch order drawn from `rng`), then one push of the change; metrics averaged
        over all minibatches, plus the seconds spent with the shared variables (`ps_seconds`: pull and
        push, which in sync mode waits for the update it is part of) and on the local epochs (`epochs_seconds`),
        on the sync chief the late changes dropped so far in the job (`sync_dropped`), for an async worker
        in a cluster the push's staleness (`staleness`: the other workers' pushes since its pull), and this
        process's updates so far whose change was not finite and was pushed as none (`discarded_updates`). With
        async updates in turn (`updateturn`) it takes the turn before the pull and gives it back after the push,
        and says how long it waited for it (`turn_wait_seconds`). A `Revaluing` batch is made after the pull,
        its GAE values by the pulled weights' value net (`revalues`)."""
        if self.turn is None:
            return self._update(batch, rng)
        waited = self.turn.take(self.session, self.cluster.is_chief, self.cluster.worker_gone)
        try:
            return {**self._update(batch, rng), "turn_wait_seconds": waited}
        finally:
            with contextlib.suppress(*distributed.LOST_CONNECTION):  # a lost ps 0 took the turn with it
                self.turn.give(self.session)

    def _update(self, batch: Batch | Revaluing, rng: np.random.Generator) -> dict[str, float]:
        sync = self._g.sync
        begin = time.perf_counter()
        label = self.session.run(sync.step) if sync else None  # read before the weights it labels
        self.session.run(self._g.pull)
        pulled = time.perf_counter()
        if isinstance(batch, Revaluing):
            start = self.session.run(self._g.pulled)
            batch = batch.resolve(NumpyPolicy.from_values(start, len(self._g.networks.policy), self.config.activation))
        feed = self._feed(batch)
        feed[self._g.update_seed] = rng.integers(np.iinfo(np.int64).max, size=2)
        metrics = self.session.run(self._g.update, feed)
        trained = time.perf_counter()
        timings = {}
        if sync:
            _, finite = self.session.run([sync.push, self._g.finite], {sync.label: label})
            sync.wait(self.session, label)
        else:
            _, finite, staleness = self.session.run([self._g.push, self._g.finite, self._g.staleness])
            if self.cluster is not None:
                timings["staleness"] = float(staleness)
        if not finite:
            self._discard(metrics)
        timings["ps_seconds"] = pulled - begin + time.perf_counter() - trained
        timings["epochs_seconds"] = trained - pulled
        if self.aggregator is not None:
            timings["sync_dropped"] = self.aggregator.dropped
        timings["discarded_updates"] = self.discarded_updates
        return {**{key: float(value) for key, value in metrics.items()}, **timings}

    def _discard(self, metrics: dict[str, Any]) -> None:
        """After an update whose change was not finite (and so was pushed as none): count it, say so, and start
        the local copy and its Adam afresh, whose moments may hold the NaN."""
        self.discarded_updates += 1
        log.warning(
            "an update's change was not finite (grad norm %s, loss terms %s): pushed as no change, Adam restarted",
            metrics["grad_norm"],
            ", ".join(f"{name} {metrics[name]}" for name in ("policy_loss", "value_loss", "entropy")),
        )
        self._reset_local()

    def finish_iteration(
        self, batch: Batch, env_steps: int, observation_moments: Moments, return_moments: Moments
    ) -> tuple[LearnerState, dict[str, float]]:
        """Count the iteration, push this worker's normaliser sums, adapt the KL penalty, read the state.

        Returns the new state and the exact KL between the acting and the updated policy on `batch`.
        """
        g = self._g
        feed = self._feed(batch)
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
        if missing := sorted(set(wanted) - set(saved)):
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
        """Close the session (which ends the sync chief's aggregator); safe to repeat."""
        if self.session is not None:
            self.session.close()
            self.session = None

    def _feed(self, batch: Batch) -> dict[tf.Tensor, np.ndarray]:
        return {tensor: getattr(batch, name) for name, tensor in self._g.feeds.items()}

    def _unpack(self, values: dict[str, Any]) -> LearnerState:
        """The `LearnerState` of the values of `_Graph.state` (or `state_after_finish`), fetched by name."""
        policy = NumpyPolicy.from_values(values["weights"], len(self._g.networks.policy), self.config.activation)
        return LearnerState(
            policy=policy,
            observation_moments=_moments(values, "observation"),
            return_moments=_moments(values, "return"),
            global_step=int(values["global_step"]),
            env_steps=int(values["env_steps"]),
            iterations=int(values["iterations"]),
            kl_beta=float(values["kl_beta"]),
        )


def _moments(values: dict[str, Any], prefix: str) -> Moments:
    count, total, squares = (values[f"{prefix}_{part}"] for part in ("count", "sum", "sumsq"))
    return Moments(float(count), np.asarray(total), np.asarray(squares))


def vector_size(shape: tuple[int, ...]) -> int:
    """The size of a vector observation or action; the MLP policy takes neither images nor scalars."""
    if len(shape) != 1:
        raise ValueError(f"spaces of shape {shape} are not supported: the policy is an MLP over vectors")
    return int(shape[0])
