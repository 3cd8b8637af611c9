"""Each replica's Pod (render/pods.py): its TF_CONFIG, Service and labels, the trainer's launch, the template's
fields kept and ours winning, scheduling."""

import json

import pytest
import yaml

from agents_operator import launch, naming, presets, render
from agents_operator.api import parse_job
from tests.render.examples import EXAMPLES, ROOT, UID, load, one_worker_job, tf_config_of

DNS_LABEL = __import__("re").compile(naming.DNS_1035_LABEL)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_each_pod_gets_its_own_tf_config_and_service(path):
    job = load(path)
    pods = render.pods(job)
    services = {s["metadata"]["name"]: s for s in render.services(job)}
    config_map = render.cluster_config(job)
    counts = job.spec.replica_specs.counts()
    assert len(pods) == sum(counts.values()) + job.topology.remote_servers
    for pod in pods:
        meta = pod["metadata"]
        replica_type, index = naming.parse_child(meta["labels"])
        if replica_type == naming.ENV_SERVER:
            continue  # no TF_CONFIG: see tests/render/test_envservers.py
        assert meta["name"] == f"{job.name}-{replica_type}-{index}"
        assert DNS_LABEL.match(meta["name"]) and len(meta["name"]) <= 63
        assert meta["ownerReferences"][0]["uid"] == UID
        cfg = tf_config_of(pod, config_map)
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
    manifest = yaml.safe_load((ROOT / "examples" / "hopper.yaml").read_text())
    manifest["spec"]["trainer"]["learningRate"] = 0.0002
    manifest["metadata"]["namespace"] = "research"
    job = parse_job(manifest)
    args = launch.argv(render.trainer_launch(job, naming.WORKER, 1))
    assert args[:3] == ["train", "--config", "hopper"]
    overrides = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")
    assert set(overrides) == {"mode", "learning_rate", "seed"}
    parsed = {k: yaml.safe_load(v) for k, v in overrides.items()}
    assert presets.resolve("hopper", parsed) == job.config
    assert args[-3:] == ["--logdir", "/var/run/agents/hopper", "--resume"]


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
    pod = render.pod(one_worker_job(template=template), "worker", 0)
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
