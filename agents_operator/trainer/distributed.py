"""A trainer's place in a TensorFlow parameter-server cluster (between-graph replication, graph mode).

The cluster comes from TF_CONFIG (`agents_operator.tfconfig`), exactly as `render` writes it. Parameter
servers only serve variables; each worker builds the learner graph with a `replica_device_setter`, so the
weights, optimizer slots, counters and normaliser statistics live on the ps tasks (sharded round-robin when
there are several) while the ops run on the worker.

Four protocols sit on top of plain `tf.distribute.Server`s:

- **Start-up in any order.** Before connecting, a replica waits for each peer's name to resolve and its
  port to accept connections, with backoff, and says so in its log.
- **Initialisation.** The chief initialises the shared variables only when some are uninitialised (a fresh
  or restarted ps): from its latest checkpoint when there is one, else from scratch. Other workers wait
  until every variable is initialised. A chief that restarts therefore keeps the live state, and a ps
  that restarts is restored from the chief's checkpoint.
- **Membership.** The cluster lists a worker address per slot (an elastic job's most workers), not only
  the workers there are: a worker that joins sets its flag in a vector on ps 0 and clears it when it
  leaves (its job finished, or SIGTERM after it was scaled away), so the chief knows who is really there.
  It takes its slot only once every ps can call it back: a replaced pod's name points to a new IP that
  a ps's gRPC channel learns only when it resolves the name again.
- **Completion.** Each ps owns a FIFO queue. The chief finishes last: once no other worker is flagged (or
  the flagged ones no longer listen: they died), it saves the final checkpoint and puts a token into every
  ps's queue, and a ps exits 0 at that token, so parameter servers do not linger.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from agents_operator import naming, topology
from agents_operator.tfconfig import TFConfig

log = logging.getLogger(__name__)

DONE_QUEUE = "agents_done_queue_{}"
LOST_CONNECTION = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.FailedPreconditionError,
    tf.errors.CancelledError,
)
"""What a session run raises when a ps went away (or came back empty): reconnect, then carry on."""
GONE_TIMEOUT_SECONDS = 900.0
WAIT_INITIAL_SECONDS = 0.5
WAIT_MAX_SECONDS = 10.0
READY_POLL_SECONDS = 0.5
CALL_BACK_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class Cluster:
    """This process's role in the cluster and the TensorFlow objects derived from it."""

    tf_config: TFConfig

    @property
    def spec(self) -> tf.train.ClusterSpec:
        return tf.train.ClusterSpec(self.tf_config.cluster)

    @property
    def is_chief(self) -> bool:
        return topology.runs_as_chief(self.tf_config)

    @property
    def num_workers(self) -> int:
        return self.tf_config.num_workers

    @property
    def device(self) -> str:
        return f"/job:{self.tf_config.task_type}/task:{self.tf_config.task_index}"

    def device_setter(self):
        """Variables on the ps tasks (round-robin), ops on this worker."""
        return tf.compat.v1.train.replica_device_setter(
            cluster=self.spec, worker_device=self.device, ps_device="/job:ps"
        )

    def session_config(self, threads: int) -> tf.compat.v1.ConfigProto:
        # Without device filters a worker also waits for every other worker to be up.
        filters = ["/job:ps", self.device]
        return tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads,
            inter_op_parallelism_threads=threads,
            device_filters=filters,
            allow_soft_placement=False,
        )

    def peers(self) -> list[tuple[str, str]]:
        """(name, address) of the replicas this one must reach: the ps tasks."""
        return [(f"ps-{i}", address) for i, address in enumerate(self.tf_config.cluster.get(naming.PS, []))]

    def worker_gone(self, slot: int) -> bool:
        """Whether worker `slot`'s server no longer accepts connections: its process is gone."""
        return not _listening(self.tf_config.cluster[naming.WORKER][slot])


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def wait_for(name: str, address: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """Block until `address` resolves and accepts TCP connections, retrying with exponential backoff."""
    host, port = _split(address)
    delay, reported = WAIT_INITIAL_SECONDS, ""
    while True:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            reason = f"its name {host} does not resolve yet ({error.strerror})"
        else:
            reason = ""
            for family, kind, proto, _, sockaddr in infos:
                with socket.socket(family, kind, proto) as sock:
                    sock.settimeout(2.0)
                    if sock.connect_ex(sockaddr) == 0:
                        if reported:
                            log.info("%s is up at %s", name, address)
                        return
            reason = f"nothing listens on {address} yet"
        if reason != reported:
            log.info("waiting for %s: %s; retrying with backoff", name, reason)
            reported = reason
        sleep(delay)
        delay = min(delay * 2, WAIT_MAX_SECONDS)


def wait_until_gone(
    others: Callable[[], list[str]],
    note: Callable[[str], None],
    timeout: float = GONE_TIMEOUT_SECONDS,
    what: str = "other worker(s) to finish",
) -> None:
    """Block until none of the addresses `others()` names (the workers flagged in the job, say) still listens
    (they left, or died), or `timeout`; `what` names them in the note that says it waits."""
    deadline = time.monotonic() + timeout
    remaining = [a for a in others() if _listening(a)]
    if remaining:
        note(f"waiting for {len(remaining)} {what}")
    while remaining and time.monotonic() < deadline:
        time.sleep(READY_POLL_SECONDS)
        remaining = [a for a in others() if _listening(a)]
    if remaining:
        note(f"gave up waiting after {timeout:.0f} s for: {', '.join(remaining)}")


def _listening(address: str) -> bool:
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


_NOT_THE_CAUSE = (
    "Graph execution error",
    "Detected at node",
    "File ",
    "Node: ",
    "[[",
    "Original stack trace",
    "Restoring from checkpoint failed",
)
"""How the lines of a graph-mode error that are not its cause begin: TensorFlow wraps the cause (say,
"Checksum does not match") in a header, the stack where the failing op was defined and the op's name."""


def first_line(error: BaseException) -> str:
    """The error's type and its most telling line (TensorFlow's messages run to pages)."""
    lines = [line.strip() for line in str(getattr(error, "message", "") or error).splitlines()]
    telling = [line for line in lines if line and not line.startswith(_NOT_THE_CAUSE)]
    return f"{type(error).__name__}: {telling[0][:300]}" if telling else type(error).__name__


def start_server(tf_config: TFConfig, threads: int) -> tf.distribute.Server:
    """This task's gRPC server, listening on the port of its own address."""
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(tf_config.cluster),
        job_name=tf_config.task_type,
        task_index=tf_config.task_index,
        config=config,
        start=True,
    )
    log.info("%s %d serving at %s", tf_config.task_type, tf_config.task_index, tf_config.address)
    return server


def _done_queue(ps_index: int, num_workers: int) -> tf.compat.v1.FIFOQueue:
    with tf.compat.v1.device(f"/job:ps/task:{ps_index}"):
        return tf.compat.v1.FIFOQueue(
            num_workers, tf.int32, shapes=[[]], shared_name=DONE_QUEUE.format(ps_index), name=f"done_{ps_index}"
        )


def done_ops(cluster: Cluster) -> list[tf.Operation]:
    """Ops (built in the chief's graph) that put its token into every ps's done queue: the job is over."""
    return [
        _done_queue(i, cluster.num_workers).enqueue(cluster.tf_config.task_index)
        for i in range(cluster.tf_config.num_ps)
    ]


def run_ps(tf_config: TFConfig, threads: int = 1) -> int:
    """Serve variables until the chief says the job is over, then return 0."""
    server = start_server(tf_config, threads)
    index = tf_config.task_index
    graph = tf.Graph()
    with graph.as_default():
        dequeue = _done_queue(index, tf_config.num_workers).dequeue()
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:ps/task:{index}"])
    with tf.compat.v1.Session(server.target, graph=graph, config=config) as session:
        session.run(dequeue)
    log.info("the chief finished the job, after every other worker: ps %d exits", index)
    return 0


@dataclass(frozen=True)
class Membership:
    """Which worker slots are taken: a flag per slot in a variable on ps 0, set by `join`, cleared by
    `leave`. It is not part of the checkpoints: a ps that restarts starts with none, and each worker, once
    it has reconnected, joins again. `done` (the chief's only) tells every ps that the job is over."""

    flags: tf.Variable
    join: tf.Operation
    leave: tf.Operation
    initialized: tf.Tensor
    done: list[tf.Operation]
    calls: list[tf.Tensor]
    """One per ps: the ps reads this worker's clock, the way it reads every pushed gradient."""

    @classmethod
    def create(cls, cluster: Cluster) -> Membership:
        v1, index = tf.compat.v1, cluster.tf_config.task_index
        with v1.device("/job:ps/task:0"):
            flags = v1.get_variable(
                "membership",
                [cluster.num_workers],
                tf.int32,
                v1.zeros_initializer(),
                trainable=False,
                collections=[],
                use_resource=True,
            )
            # Built on ps 0, beside the flags: taking or freeing a slot sends nothing from this worker.
            slot, one, zero = tf.constant([index]), tf.constant([1]), tf.constant([0])
            join = flags.scatter_update(tf.IndexedSlices(one, slot)).op
            leave = flags.scatter_update(tf.IndexedSlices(zero, slot)).op
        with v1.device(cluster.device):
            done = done_ops(cluster) if cluster.is_chief else []
            clock = tf.timestamp()  # stateful: never folded into a constant on the ps
        calls = []
        for ps in range(cluster.tf_config.num_ps):
            with v1.device(f"/job:ps/task:{ps}"):
                calls.append(tf.identity(clock, name=f"call_back_{ps}"))
        return cls(flags, join, leave, v1.is_variable_initialized(flags), done, calls)

    def enter(self, session: tf.compat.v1.Session, is_chief: bool) -> None:
        """Take this worker's slot (the chief first makes the flags when a fresh ps has none), once every ps
        can call this worker back (`wait_until_called_back`)."""
        if is_chief and not session.run(self.initialized):
            session.run(self.flags.initializer)
        while not session.run(self.initialized):
            time.sleep(READY_POLL_SECONDS)
        wait_until_called_back(session, self.calls)
        session.run(self.join)

    def members(self, session: tf.compat.v1.Session) -> list[int]:
        """The slots taken now."""
        return [int(i) for i in np.flatnonzero(session.run(self.flags))]

    def give_back(self, session: tf.compat.v1.Session, then: tf.Operation | None = None) -> None:
        """Free this worker's slot, then run `then` (sync mode's wake-up: the step in progress needs one change
        fewer); nothing to free when ps 0 is gone: its flags went with it."""
        with contextlib.suppress(*LOST_CONNECTION):
            session.run(self.leave)
            if then is not None:
                session.run(then)


def wait_until_called_back(
    session: tf.compat.v1.Session,
    calls: list[tf.Tensor],
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = CALL_BACK_TIMEOUT_SECONDS,
) -> None:
    """Block until every ps can fetch a tensor from this worker, retrying while one cannot (UnavailableError).

    A ps fetches what a worker sends it (every pushed gradient) by calling the worker, through a gRPC channel
    opened at the worker's first call. When a worker's pod is replaced, its name moves to a new IP, but the
    ps's channel still dials the old one until gRPC resolves the name again (at a failed connection, at most
    every 30 s): the new worker's first pushes would fail. This waits that out, and says so, before the
    worker takes its slot; past `timeout` the last error is raised.
    """
    deadline, delay, reported = time.monotonic() + timeout, WAIT_INITIAL_SECONDS, False
    while True:
        try:
            session.run(calls)
            if reported:
                log.info("every ps reaches this worker now")
            return
        except tf.errors.UnavailableError as error:
            if time.monotonic() >= deadline:
                raise
            if not reported:
                log.info("a ps cannot reach this worker yet (%s); retrying with backoff", first_line(error))
                reported = True
        sleep(delay)
        delay = min(delay * 2, WAIT_MAX_SECONDS)


def prepare_session(
    session: tf.compat.v1.Session,
    uninitialized: tf.Tensor,
    initialize: Callable[[], None],
    is_chief: bool,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Make the shared variables usable; returns True when this call initialised (or restored) them.

    The chief calls `initialize` (restore the latest checkpoint, else run the initialisers) only when some
    variable is uninitialised; other workers wait until none is.
    """
    missing = session.run(uninitialized)
    if is_chief:
        if len(missing):
            log.info("%d shared variables are uninitialised: initialising them", len(missing))
            initialize()
            return True
        log.info("shared variables are live on the ps: keeping them")
        return False
    reported = False
    while len(missing):
        if not reported:
            log.info("waiting for the chief to initialise %d shared variables", len(missing))
            reported = True
        sleep(READY_POLL_SECONDS)
        missing = session.run(uninitialized)
    return False
