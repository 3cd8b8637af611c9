"""The topology of a job: its pods, the chief, the env servers' shares and addresses, the seeds."""

from pathlib import Path

import pytest

from agents_operator import manifests, naming, presets, tfconfig, topology
from agents_operator.topology import EnvServerShare, Topology


def layout(placement="remote", workers=2, servers=2, evaluators=1, ps=1, envs=8, seed=100) -> Topology:
    config = presets.resolve("pendulum", {"envs_per_worker": envs, "seed": seed})
    counts = {naming.PS: ps, naming.WORKER: workers, naming.EVALUATOR: evaluators}
    return Topology("j", "ns", counts, placement, servers, 6000, config)


@pytest.mark.parametrize(
    ("replica_type", "index", "chief"),
    [("worker", 0, True), ("worker", 1, False), ("ps", 0, False), ("evaluator", 0, False), ("envserver", 0, False)],
)
def test_worker_0_is_the_chief(replica_type, index, chief):
    assert topology.is_chief(replica_type, index) is chief


def test_a_process_without_tf_config_is_its_own_chief():
    assert topology.runs_as_chief(None)
    assert topology.runs_as_chief(tfconfig.build("j", "ns", {"ps": 1, "worker": 2}, "worker", 0))
    assert not topology.runs_as_chief(tfconfig.build("j", "ns", {"ps": 1, "worker": 2}, "worker", 1))


def test_slots_put_the_env_servers_between_the_ps_and_the_workers():
    assert layout().slots() == [
        ("ps", 0),
        *(("envserver", i) for i in range(5)),
        ("worker", 0),
        ("worker", 1),
        ("evaluator", 0),
    ]
    assert layout("sidecar", servers=1).slots() == [("ps", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]


def test_an_elastic_job_numbers_the_evaluators_env_server_and_seeds_past_every_worker_slot():
    """Scaling the workers renames no pod and reseeds no environment: the evaluator's env server and its seed
    come after the most workers the job may have."""
    layouts = [
        Topology("j", "ns", {"ps": 1, "worker": w, "evaluator": 1}, "remote", 2, 6000, layout().config, 4)
        for w in (1, 3)
    ]
    assert layouts[0].members == layouts[1].members == {"ps": 1, "worker": 4, "evaluator": 1}
    assert [s for s in layouts[0].slots() if s[0] == "envserver"] == [("envserver", i) for i in (0, 1, 8)]
    assert [s for s in layouts[1].slots() if s[0] == "envserver"] == [("envserver", i) for i in (0, 1, 2, 3, 4, 5, 8)]
    for one in layouts:
        assert one.env_server_pods(naming.EVALUATOR, 0) == range(8, 9)
        assert one.remote_share(8) == EnvServerShare(100 + 4 * 8, 1)
        assert one.env_server_addresses(naming.EVALUATOR, 0) == ("j-envserver-8.ns.svc:6000",)
    assert layout().members == {"ps": 1, "worker": 2, "evaluator": 1}  # not elastic: the workers there are


def test_env_servers_seed_each_worker_as_its_own_batch_would_be():
    remote = layout(envs=7, servers=3, workers=2)
    assert remote.remote_servers == topology.env_server_count(2, 3, True) == 7
    assert [remote.remote_share(i) for i in range(7)] == [
        EnvServerShare(100, 3),
        EnvServerShare(103, 2),
        EnvServerShare(105, 2),
        EnvServerShare(107, 3),
        EnvServerShare(110, 2),
        EnvServerShare(112, 2),
        EnvServerShare(114, 1),  # the evaluator's, past every worker's seeds
    ]
    for worker in (0, 1):
        shares = remote.env_server_shares(naming.WORKER, worker)
        assert shares[0].seed == topology.first_env_seed(remote.config, worker)
        assert sum(s.envs for s in shares) == remote.config.envs_per_worker
    assert layout("colocated").env_server_shares(naming.WORKER, 0) == []
    assert layout().env_server_shares(naming.PS, 0) == []


def test_addresses_name_each_replicas_own_servers():
    remote = layout()
    assert remote.env_server_pods(naming.WORKER, 1) == range(2, 4)
    assert remote.env_server_addresses(naming.WORKER, 1) == ("j-envserver-2.ns.svc:6000", "j-envserver-3.ns.svc:6000")
    assert remote.env_server_addresses(naming.EVALUATOR, 0) == ("j-envserver-4.ns.svc:6000",)
    sidecar = layout("sidecar", servers=1)
    assert sidecar.env_server_pods(naming.WORKER, 1) == range(0)
    assert sidecar.env_server_addresses(naming.WORKER, 1) == ("localhost:6000",)
    assert layout("colocated").env_server_addresses(naming.WORKER, 0) == ()


def test_a_jobs_topology_follows_its_spec():
    job = manifests.load_job(Path(__file__).resolve().parent.parent / "examples" / "cheetah-remote.yaml")
    counts = {naming.PS: 1, naming.WORKER: 2, naming.EVALUATOR: 0}
    assert job.topology == Topology("cheetah-remote", "default", counts, "remote", 2, 50051, job.config, 2)
    job.metadata.namespace = "research"  # what `agents-operator render --namespace` does
    assert job.topology.env_server_addresses(naming.WORKER, 0)[0] == "cheetah-remote-envserver-0.research.svc:50051"
