"""The examples/ manifests as render's tests load them (in namespace research, with a uid), and the one-worker job
the tests of single fields render."""

from pathlib import Path

from agents_operator import manifests, tfconfig
from agents_operator.api import parse_job

ROOT = Path(__file__).resolve().parents[2]


EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


UID = "6c1d2e3f-0000-4000-8000-000000000001"


def load(path: Path, uid: str | None = UID):
    job = manifests.load_job(path)
    job.metadata.namespace = "research"
    job.metadata.uid = uid
    return job


def one_worker_job(**worker):
    """Job j in namespace ns: one worker (its spec updated with `worker`), image trainer:1."""
    return parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"image": "trainer:1", "replicaSpecs": {"worker": {"replicas": 1, **worker}}},
        }
    )


def tf_config_of(pod: dict, config_map: dict) -> tfconfig.TFConfig:
    """The TF_CONFIG the trainer of `pod` reads: its variable, the cluster from the file it names, which must be
    a key of the job's ConfigMap where the pod mounts it."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    path = env[tfconfig.CLUSTER_FILE_VAR]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"] and mount["readOnly"]
    files = {f"{mount['mountPath']}/{key}": text for key, text in config_map["data"].items()}
    config = tfconfig.from_env(env, files.__getitem__)
    assert config is not None
    return config
