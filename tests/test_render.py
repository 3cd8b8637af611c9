import json
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from agents_operator import launch, manifests, naming, presets, render, tfconfig, topology
from agents_operator.api import parse_job

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
UID = "6c1d2e3f-0000-4000-8000-000000000001"
DNS_LABEL = __import__("re").compile(naming.DNS_1035_LABEL)


def load(path: Path, uid: str | None = UID):
    job = manifests.load_job(path)
    job.metadata.namespace = "research"
    job.metadata.uid = uid
    return job


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path):
    """What render makes of each example is pinned; set UPDATE_GOLDEN=1 to rewrite after a deliberate change."""
    rendered = manifests.dump_all(render.children(load(path)))
    golden = ROOT / "tests" / "golden" / f"{path.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_c_emitter_writes_what_the_python_one_does(path):
    children = render.children(load(path))
    assert manifests.dump_all(children) == manifests.dump_all(children, manifests.PureDumper)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_children_are_valid_kubernetes_objects(path):
    for obj in render.children(load(path)):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_non_pod_children_are_the_children_but_the_pods(path):
    job = load(path)
    assert render.non_pod_children(job) == [c for c in render.children(job) if c["kind"] != "Pod"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_each_pod_gets_its_own_tf_config_and_service(path):
    job = load(path)
    pods = render.pods(job)
    services = {s["metadata"]["name"]: s for s in render.services(job)}
    counts = job.spec.replica_specs.counts()
    assert len(pods) == sum(counts.values()) + job.topology.remote_servers
    for pod in pods:
        meta = pod["metadata"]
        replica_type, index = naming.parse_child(meta["labels"])
        if replica_type == naming.ENV_SERVER:
            continue  # no TF_CONFIG: see the env-server tests below
        assert meta["name"] == f"{job.name}-{replica_type}-{index}"
        assert DNS_LABEL.match(meta["name"]) and len(meta["name"]) <= 63
        assert meta["ownerReferences"][0]["uid"] == UID
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        cfg = tfconfig.parse(env["TF_CONFIG"])
        assert (cfg.task_type, cfg.task_index) == (replica_type, index)
        assert cfg.num_workers == counts["worker"] and cfg.num_ps == counts["ps"]
        if replica_type != naming.EVALUATOR:
            assert cfg.address == f"{meta['name']}.research.svc:2222"
            svc = services[meta["name"]]
            assert svc["spec"]["clusterIP"] == "None"
            assert all(meta["labels"][k] == v for k, v in svc["spec"]["selector"].items())
        assert (meta["labels"].get(naming.LABEL_ROLE) == "chief") == (replica_type == "worker" and index == 0)
        assert pod["spec"]["restartPolicy"] == "Never"


def test_trainer_args_resolve_to_the_same_config():
    job = load(ROOT / "examples" / "hopper.yaml")
    args = launch.argv(render.trainer_launch(job, naming.WORKER, 1))
    assert args[:3] == ["train", "--config", "hopper"]
    overrides = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")
    assert set(overrides) == {"mode", "learning_rate", "seed"}
    parsed = {k: yaml.safe_load(v) for k, v in overrides.items()}
    assert presets.resolve("hopper", parsed) == job.config
    assert args[-3:] == ["--logdir", "/var/run/agents/hopper", "--resume"]


def _job(**worker):
    return parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"image": "trainer:1", "replicaSpecs": {"worker": {"replicas": 1, **worker}}},
        }
    )


def test_restricted_security_defaults():
    pod = render.pod(_job(), "worker", 0)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_template_fields_are_kept_and_win():
    template = {
        "metadata": {"labels": {"team": "rl", naming.LABEL_JOB: "spoof"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"pool": "cpu"},
            "securityContext": {"runAsUser": 4242},
            "containers": [
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
                {
                    "name": "agents",
                    "command": ["python", "-m", "mytrainer"],
                    "env": [{"name": "FOO", "value": "1"}, {"name": "TF_CONFIG", "value": "stale"}],
                    "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                    "resources": {"limits": {"cpu": "2"}},
                },
            ],
        },
    }
    pod = render.pod(_job(template=template), "worker", 0)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "cpu"}
    assert spec["securityContext"]["runAsUser"] == 4242
    assert spec["securityContext"]["runAsNonRoot"] is True
    sidecar, trainer = spec["containers"]
    assert sidecar["command"] == ["sleep", "inf"] and "env" not in sidecar
    assert trainer["command"] == ["python", "-m", "mytrainer"] and "args" not in trainer
    assert trainer["image"] == "trainer:1"
    env = [e["name"] for e in trainer["env"]]
    assert env.count("TF_CONFIG") == 1 and "FOO" in env
    assert json.loads(next(e["value"] for e in trainer["env"] if e["name"] == "TF_CONFIG"))["task"]["index"] == 0
    assert trainer["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert trainer["resources"] == {"limits": {"cpu": "2"}}
    assert pod["metadata"]["labels"]["team"] == "rl"
    assert pod["metadata"]["labels"][naming.LABEL_JOB] == "j"  # ours win: selectors depend on them
    assert pod["metadata"]["annotations"] == {"a": "b"}


def test_offline_render_has_no_owner_reference():
    pod = render.pod(_job(), "worker", 0)
    assert "ownerReferences" not in pod["metadata"]


def test_storage_volume():
    job = load(ROOT / "examples" / "bullet-ant.yaml")
    pod = render.pod(job, "worker", 3)
    assert {"name": "agents-run", "persistentVolumeClaim": {"claimName": "agents-runs"}} in pod["spec"]["volumes"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "agents-run", "mountPath": "/var/run/agents"} in mounts
    assert render.run_dir(job) == "/var/run/agents/bullet-ant"


def test_tensorboard_only_when_enabled():
    assert render.tensorboard(load(ROOT / "examples" / "pendulum.yaml")) == []
    job = load(ROOT / "examples" / "bullet-ant.yaml")
    deployment, service, _policy = render.tensorboard(job)
    assert deployment["metadata"]["name"] == "bullet-ant-tensorboard"
    assert service["spec"]["ports"][0]["targetPort"] == render.TENSORBOARD_PORT
    assert render.tensorboard_url(job) == "http://bullet-ant-tensorboard.research.svc"


def test_scheduling_policy():
    data = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "j"},
        "spec": {
            "replicaSpecs": {"worker": {}},
            "runPolicy": {"schedulingPolicy": {"schedulerName": "volcano", "priorityClass": "hi", "queue": "q"}},
        },
    }
    pod = render.pod(parse_job(data), "worker", 0)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["spec"]["priorityClassName"] == "hi"
    assert pod["metadata"]["labels"][render.QUEUE_LABEL] == "q"


def test_network_policy_opens_the_grpc_port_to_the_jobs_own_replicas_only():
    job = load(ROOT / "examples" / "pendulum.yaml")
    policy = render.network_policy(job)
    selector = policy["spec"]["podSelector"]
    assert selector["matchLabels"] == {naming.LABEL_JOB: "pendulum"}
    assert selector["matchExpressions"] == [{"key": naming.LABEL_TYPE, "operator": "Exists"}]
    (grpc,) = policy["spec"]["ingress"]  # the metrics port: see tests/test_podsecurity.py
    assert grpc["from"] == [{"podSelector": selector}]
    assert grpc["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID
    assert render.children(job)[0] == policy
    tensorboard = render.tensorboard(load(ROOT / "examples" / "bullet-ant.yaml"))[0]
    assert naming.LABEL_TYPE not in tensorboard["spec"]["template"]["metadata"]["labels"]


# --- env servers -----------------------------------------------------------------------------------------


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
