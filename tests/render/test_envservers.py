"""The env servers' containers (render/envservers.py): remote pods and sidecars, each seeded and sized as the
worker's own batch would be, reached where the worker is told."""

import yaml

from agents_operator import naming, render, tfconfig, topology
from agents_operator.api import parse_job
from tests.render.examples import ROOT, load


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_colocated_jobs_have_no_env_servers():
    job = load(ROOT / "examples" / "pendulum.yaml")
    for pod in render.pods(job):
        assert "initContainers" not in pod["spec"]
        assert tfconfig.ENV_SERVERS_VAR not in _env(pod["spec"]["containers"][0])
    assert job.topology.remote_servers == 0


def test_remote_servers_split_each_workers_batch_and_seed_it_as_colocated():
    job = load(ROOT / "examples" / "cheetah-remote.yaml")
    config = job.config
    pods = {p["metadata"]["name"]: p for p in render.pods(job)}
    services = {s["metadata"]["name"]: s for s in render.services(job)}
    assert [n for n in pods if "-envserver-" in n] == [f"cheetah-remote-envserver-{i}" for i in range(4)]
    for worker in range(2):
        container = pods[f"cheetah-remote-worker-{worker}"]["spec"]["containers"][0]
        servers = tfconfig.parse_env_servers(_env(container)[tfconfig.ENV_SERVERS_VAR])
        assert servers.mode == "step"
        assert servers.addresses == tuple(
            f"cheetah-remote-envserver-{2 * worker + k}.research.svc:50051" for k in range(2)
        )
        seeds, envs = [], 0
        for address in servers.addresses:
            name = address.split(".")[0]
            server = pods[name]["spec"]["containers"][0]
            assert server["name"] == naming.ENV_SERVER_CONTAINER
            args = server["args"]
            assert args[:3] == ["env-server", "--env", config.env_id]
            seeds.append(int(_flag(args, "--seed")))
            envs += int(_flag(args, "--envs"))
            assert services[name]["spec"]["ports"] == [
                {"name": "env-grpc", "port": 50051, "targetPort": 50051, "protocol": "TCP"}
            ]
        # The colocated BatchEnv of worker w seeds environment j with seed + w * envs_per_worker + j.
        assert envs == config.envs_per_worker
        assert seeds == [config.seed + worker * config.envs_per_worker + k * 8 for k in range(2)]


def test_remote_server_pods_take_their_template_image_resources_and_probes():
    job = load(ROOT / "examples" / "cheetah-remote.yaml")
    pod = render.pod(job, naming.ENV_SERVER, 3)
    assert pod["metadata"]["labels"][naming.LABEL_TYPE] == naming.ENV_SERVER
    assert pod["spec"]["nodeSelector"] == {"agents.dev/pool": "simulation"}
    assert pod["spec"]["restartPolicy"] == "Never"
    # The run directory is the trainer's business: an env server has only its scratch /tmp.
    assert [v["name"] for v in pod["spec"]["volumes"]] == [render.SCRATCH_VOLUME]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == render.DEFAULT_IMAGE
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "2Gi"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 50051}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_uneven_split_and_evaluator_server():
    job = parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "odd", "namespace": "ns"},
            "spec": {
                "trainer": {"preset": "pendulum", "envsPerWorker": 7, "seed": 100},
                "replicaSpecs": {"worker": {"replicas": 1}, "evaluator": {}},
                "storage": {"persistentVolumeClaim": {"claimName": "runs"}},
                "environments": {"placement": "remote", "serversPerWorker": 3, "port": 6000},
            },
        }
    )
    shares = [job.topology.remote_share(i) for i in range(job.topology.remote_servers)]
    assert shares == [
        topology.EnvServerShare(100, 3),
        topology.EnvServerShare(103, 2),
        topology.EnvServerShare(105, 2),
        topology.EnvServerShare(107, 1),  # the evaluator's own, past every worker's seeds
    ]
    evaluator = render.pod(job, naming.EVALUATOR, 0)["spec"]["containers"][0]
    servers = tfconfig.parse_env_servers(_env(evaluator)[tfconfig.ENV_SERVERS_VAR])
    assert servers.addresses == ("odd-envserver-3.ns.svc:6000",)
    assert job.topology.slots() == [
        *((naming.ENV_SERVER, i) for i in range(4)),
        (naming.WORKER, 0),
        (naming.EVALUATOR, 0),
    ]
    policy = render.network_policy(job)
    assert policy["spec"]["ingress"][0]["ports"] == [
        {"port": 2222, "protocol": "TCP"},
        {"port": 6000, "protocol": "TCP"},
    ]


def test_sidecar_is_a_native_sidecar_reached_over_localhost():
    job = load(ROOT / "examples" / "pendulum-sidecar.yaml")
    config = job.config
    assert job.topology.remote_servers == 0
    for pod in render.pods(job):
        replica_type, index = naming.parse_child(pod["metadata"]["labels"])
        trainer = pod["spec"]["containers"][0]
        if replica_type == naming.PS:
            assert "initContainers" not in pod["spec"]
            assert tfconfig.ENV_SERVERS_VAR not in _env(trainer)
            continue
        (sidecar,) = pod["spec"]["initContainers"]
        assert sidecar["name"] == naming.ENV_SERVER_CONTAINER and sidecar["restartPolicy"] == "Always"
        assert int(_flag(sidecar["args"], "--seed")) == config.seed + index * config.envs_per_worker
        assert int(_flag(sidecar["args"], "--envs")) == config.envs_per_worker
        assert sidecar["resources"]["limits"] == {"memory": "1Gi"}
        assert sidecar["readinessProbe"]["grpc"] == {"port": 50051}
        servers = tfconfig.parse_env_servers(_env(trainer)[tfconfig.ENV_SERVERS_VAR])
        assert servers == tfconfig.EnvServers(("localhost:50051",), "rollout")
    # No pod outside the job may reach the sidecar: its port is not opened by the NetworkPolicy.
    ports = [p["port"] for rule in render.network_policy(job)["spec"]["ingress"] for p in rule["ports"]]
    assert 50051 not in ports


def test_a_template_sidecar_of_the_same_name_is_replaced_not_doubled():
    data = yaml.safe_load((ROOT / "examples" / "pendulum-sidecar.yaml").read_text())
    data["spec"]["replicaSpecs"]["worker"]["template"] = {
        "spec": {
            "containers": [{"name": "agents"}],
            "initContainers": [{"name": "env-server", "image": "old"}, {"name": "setup", "image": "busybox"}],
        }
    }
    pod = render.pod(parse_job(data), naming.WORKER, 1)
    names = [c["name"] for c in pod["spec"]["initContainers"]]
    assert names == ["setup", "env-server"]
