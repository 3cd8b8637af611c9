"""The examples/ manifests as render's tests load them: in namespace research, with a uid."""

from pathlib import Path

from agents_operator import manifests

ROOT = Path(__file__).resolve().parents[2]


EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


UID = "6c1d2e3f-0000-4000-8000-000000000001"


def load(path: Path, uid: str | None = UID):
    job = manifests.load_job(path)
    job.metadata.namespace = "research"
    job.metadata.uid = uid
    return job
