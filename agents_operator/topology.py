"""Who is who in a job: its pods, the chief, the env servers (how many, what each simulates, where they are
reached) and the seeds. Pure module.

The operator's render and reconcile, the local launcher and the trainer all depend on these facts; they ask
this module rather than work them out again, so that a worker's environments are seeded the same whether it
simulates them itself or env servers do, and every process agrees on the chief.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents_operator import naming, tfconfig
from agents_operator.config import TrainerConfig

SIMULATING_TYPES = (naming.WORKER, naming.EVALUATOR)
"""Replicas that step environments: with env servers placed outside, each has its own."""
EVALUATION_SEED_OFFSET = 1_000_000
"""The chief's evaluation episodes are seeded `seed` + this: never a training environment's seed."""
EVALUATOR_SEED_OFFSET = 2_000_000
"""The evaluator's episodes are seeded `seed` + this: apart from training and the chief's evaluations."""


# --- the chief and the seeds -----------------------------------------------------------------------------


def is_chief(replica_type: str, index: int) -> bool:
    """Worker 0 is the chief: it initialises the shared state, checkpoints, writes summaries, serves progress."""
    return replica_type == naming.WORKER and index == 0


def runs_as_chief(tf_config: tfconfig.TFConfig | None) -> bool:
    """Whether the process of this TF_CONFIG is the chief; one without (a single-process run) is its own."""
    return tf_config is None or is_chief(tf_config.task_type, tf_config.task_index)


def first_env_seed(config: TrainerConfig, worker: int) -> int:
    """Seed of worker `worker`'s first environment; its environment j is seeded with this + j, so no two
    environments of a job share a seed. Index `workers` is past every worker's: the evaluator's env server."""
    return config.seed + worker * config.envs_per_worker


def env_server_count(workers: int, servers_per_worker: int, evaluator: bool) -> int:
    """Env-server pods of a remote placement: each worker's own, then one for the evaluator."""
    return workers * servers_per_worker + (1 if evaluator else 0)


# --- a job's topology ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvServerShare:
    """What one env server simulates: `envs` environments seeded `seed`, `seed + 1`, ... on first reset."""

    seed: int
    envs: int


@dataclass(frozen=True)
class Topology:
    """The pods of one job and how its env servers are laid out (`api.AgentsJob.topology` builds it)."""

    job: str
    namespace: str
    counts: dict[str, int]
    """Replicas per type (`naming.REPLICA_TYPES`), 0 for absent types."""
    placement: str
    """Where environments run: colocated, sidecar or remote."""
    servers_per_worker: int
    env_port: int
    config: TrainerConfig
    worker_slots: int = 0
    """How many worker addresses the cluster lists: an elastic job's most workers (so that no replica's
    TF_CONFIG changes when it scales), else its workers (0: the same)."""

    @property
    def members(self) -> dict[str, int]:
        """Addresses per type that every TF_CONFIG lists: the ps, the worker slots (the evaluator is none)."""
        return {**self.counts, naming.WORKER: max(self.worker_slots, self.counts[naming.WORKER])}

    @property
    def remote_servers(self) -> int:
        """How many env-server pods `<job>-envserver-<i>` there are: 0 unless the placement is remote."""
        return len(self.remote_server_indices())

    def remote_server_indices(self) -> list[int]:
        """The indices of the env-server pods of a remote placement: each worker's own, then the evaluator's,
        numbered after every worker slot's (so that scaling the workers never renames it)."""
        if self.placement != "remote":
            return []
        own = list(range(self.counts[naming.WORKER] * self.servers_per_worker))
        evaluator = [self.members[naming.WORKER] * self.servers_per_worker] if self.counts[naming.EVALUATOR] else []
        return own + evaluator

    def replicas(self) -> list[tuple[str, int]]:
        """(type, index) of every replica (ps, workers, evaluator), env servers aside."""
        return [(t, i) for t in naming.REPLICA_TYPES for i in range(self.counts[t])]

    def slots(self) -> list[tuple[str, int]]:
        """(type, index) of every pod of the job, in the order they are created: ps, env servers, the rest."""
        own = self.replicas()
        servers = [(naming.ENV_SERVER, i) for i in self.remote_server_indices()]
        return [s for s in own if s[0] == naming.PS] + servers + [s for s in own if s[0] != naming.PS]

    def env_server_shares(self, replica_type: str, index: int) -> list[EnvServerShare]:
        """The env servers of one worker or evaluator in batch order ([] when it simulates its own).

        A worker's servers split its `envs_per_worker` environments (the first ones take one more when they
        do not divide evenly) and are seeded as its colocated `BatchEnv` would be, so a placement never
        changes which episodes are played. An evaluator plays single episodes (seeded per evaluation): one
        environment.
        """
        if self.placement == "colocated" or replica_type not in SIMULATING_TYPES:
            return []
        if replica_type == naming.EVALUATOR:
            return [EnvServerShare(first_env_seed(self.config, self.members[naming.WORKER]), 1)]
        servers = self.servers_per_worker if self.placement == "remote" else 1
        base, extra = divmod(self.config.envs_per_worker, servers)
        shares, offset = [], first_env_seed(self.config, index)
        for k in range(servers):
            envs = base + (1 if k < extra else 0)
            shares.append(EnvServerShare(offset, envs))
            offset += envs
        return shares

    def env_server_pods(self, replica_type: str, index: int) -> range:
        """Indices of the env-server pods of a worker or the evaluator in batch order (empty unless the
        placement is remote): workers own `servers_per_worker` each, in worker order; the evaluator's comes
        after them."""
        if self.placement != "remote":
            return range(0)
        owner = index if replica_type == naming.WORKER else self.members[naming.WORKER]
        first = owner * self.servers_per_worker
        return range(first, first + len(self.env_server_shares(replica_type, index)))

    def remote_share(self, server: int) -> EnvServerShare:
        """The share of env-server pod `<job>-envserver-<server>` of a remote placement."""
        owner, k = divmod(server, self.servers_per_worker)
        if owner < self.members[naming.WORKER]:
            return self.env_server_shares(naming.WORKER, owner)[k]
        return self.env_server_shares(naming.EVALUATOR, 0)[0]

    def env_server_addresses(self, replica_type: str, index: int) -> tuple[str, ...]:
        """Addresses of one replica's env servers in batch order (what AGENTS_ENV_SERVERS tells it): its own
        pod's sidecar over localhost, or env-server pods through their Services."""
        if self.placement == "sidecar":
            return tuple(tfconfig.localhost(self.env_port) for _ in self.env_server_shares(replica_type, index))
        return tuple(
            tfconfig.host(self.job, naming.ENV_SERVER, k, self.namespace, self.env_port)
            for k in self.env_server_pods(replica_type, index)
        )
