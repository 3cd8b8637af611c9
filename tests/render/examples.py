"""The examples/ manifests as render's tests load them (in namespace research, with a uid), and the one-worker job
the tests of single fields render."""

from pathlib import Path

from agents_operator import manifests
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
