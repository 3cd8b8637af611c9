"""What every child shares (render/common.py): the security defaults, the owner reference, the run directory's
volume."""

from agents_operator import render
from tests.render.examples import ROOT, load, one_worker_job


def test_restricted_security_defaults():
    pod = render.pod(one_worker_job(), "worker", 0)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_offline_render_has_no_owner_reference():
    pod = render.pod(one_worker_job(), "worker", 0)
    assert "ownerReferences" not in pod["metadata"]


def test_storage_volume():
    job = load(ROOT / "examples" / "bullet-ant.yaml")
    pod = render.pod(job, "worker", 3)
    assert {"name": "agents-run", "persistentVolumeClaim": {"claimName": "agents-runs"}} in pod["spec"]["volumes"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "agents-run", "mountPath": "/var/run/agents"} in mounts
    assert render.run_dir(job) == "/var/run/agents/bullet-ant"
