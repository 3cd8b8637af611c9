"""Restricted by default: what the operator creates meets Pod Security Standard "restricted" whatever the
template says, a Privileged job runs only where the operator allows it, job pods carry no API token, and the
metrics and TensorBoard ports are open only to who needs them.

`violations` is an oracle written from the standard's page, independent of `podsecurity`: what the API
server's PodSecurity admission would refuse (tests/e2e/test_pod_security.py asks a real one).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents_operator import local, manifests, reconcile, render
from agents_operator.api import parse_job
from agents_operator.reconcile import Create
from tests.api.cases import ESCALATIONS

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SAFE_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _context_violations(where: str, sc: dict) -> list[str]:
    """What the standard forbids a security context (pod or container) to say explicitly."""
    out = []
    if sc.get("runAsNonRoot") is False or sc.get("runAsUser") == 0:
        out.append(f"{where}: runAsNonRoot false or runAsUser 0")
    for profile in ("seccompProfile", "appArmorProfile"):
        if (sc.get(profile) or {}).get("type", "RuntimeDefault") not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: {profile}")
    selinux = sc.get("seLinuxOptions") or {}
    if selinux.get("type", "container_t") not in (
        "container_t",
        "container_init_t",
        "container_kvm_t",
        "container_engine_t",
    ):
        out.append(f"{where}: SELinux type")
    if "user" in selinux or "role" in selinux or (sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{where}: SELinux user/role or hostProcess")
    return out


def _container_violations(where: str, c: dict, pod_sc: dict) -> list[str]:
    sc = c.get("securityContext") or {}
    out = _context_violations(where, sc)
    if sc.get("privileged") or sc.get("procMount", "Default") != "Default":
        out.append(f"{where}: privileged or procMount")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}: allowPrivilegeEscalation must be false")
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
        out.append(f"{where}: capabilities")
    if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
        out.append(f"{where}: runAsNonRoot must be true (pod or container)")
    if not (sc.get("seccompProfile") or pod_sc.get("seccompProfile")):
        out.append(f"{where}: a seccomp profile must be set (pod or container)")
    if any(p.get("hostPort") for p in c.get("ports") or []):
        out.append(f"{where}: hostPort")
    return out


def violations(spec: dict) -> list[str]:
    """What Pod Security "restricted" says about a pod spec (empty: admitted)."""
    out = [f"{h}" for h in ("hostNetwork", "hostPID", "hostIPC") if spec.get(h)]
    out += [f"volume {v['name']}" for v in spec.get("volumes") or [] if set(v) - {"name"} - SAFE_VOLUMES]
    pod_sc = spec.get("securityContext") or {}
    out += _context_violations("pod", pod_sc)
    out += [f"sysctl {s['name']}" for s in pod_sc.get("sysctls") or [] if not s["name"].startswith("net.ipv4.")]
    for lst in ("containers", "initContainers"):
        for c in spec.get(lst) or []:
            out += _container_violations(f"{lst}/{c['name']}", c, pod_sc)
    return out


def job(template: dict | None = None, placement: str = "colocated", pod_security: str | None = None, **extra):
    data = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "image": "trainer:1",
            "replicaSpecs": {"ps": {}, "worker": {"replicas": 2, **({"template": template} if template else {})}},
            "environments": {"placement": placement},
            **({"podSecurity": pod_security} if pod_security else {}),
            **extra,
        },
    }
    return parse_job(data)


INIT_AND_EXTRA = {
    "spec": {
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
        "containers": [{"name": "agents"}, {"name": "logs", "image": "busybox", "command": ["sleep", "inf"]}],
    }
}


def _pod_specs(j) -> list[dict]:
    specs = [p["spec"] for p in render.pods(j)]
    specs += [c["spec"]["template"]["spec"] for c in render.tensorboard(j) if c["kind"] == "Deployment"]
    return specs


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_renders_restricted_pods(path):
    for spec in _pod_specs(manifests.load_job(path)):
        assert violations(spec) == []


@pytest.mark.parametrize("placement", ["colocated", "sidecar", "remote"])
def test_init_extra_and_sidecar_containers_get_the_restricted_defaults(placement):
    specs = _pod_specs(job(INIT_AND_EXTRA, placement))
    workers = [s for s in specs if any(c["name"] == "logs" for c in s["containers"])]
    assert len(workers) == 2 and all(s["initContainers"][0]["name"] == "fetch" for s in workers)
    for spec in specs:
        assert violations(spec) == []


@pytest.mark.parametrize(("pod_spec", "_field", "_reason"), ESCALATIONS, ids=lambda v: str(v)[:40])
def test_a_restricted_job_renders_restricted_pods_whatever_its_template_says(pod_spec, _field, _reason):
    """Validate refuses these templates; render makes the pods restricted even so (e.g. for a job the API
    server stored before the rules): the job is parsed as Privileged, then made Restricted."""
    j = job({"spec": copy.deepcopy(pod_spec)}, pod_security="Privileged")
    assert violations(render.pod(j, "worker", 0)["spec"]) != []  # Privileged keeps what the template says
    j.spec.pod_security = "Restricted"
    left = violations(render.pod(j, "worker", 0)["spec"])
    node_volume = any(set(v) - {"name"} - SAFE_VOLUMES for v in pod_spec.get("volumes") or [])
    assert left == ([f"volume {pod_spec['volumes'][0]['name']}"] if node_volume else [])


def test_what_a_restricted_template_may_say_is_kept():
    template = {
        "spec": {
            "securityContext": {"runAsUser": 4242, "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
            "containers": [
                {"name": "agents", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["KILL"]}}}
            ],
        }
    }
    spec = render.pod(job(template), "worker", 0)["spec"]
    assert spec["securityContext"]["runAsUser"] == 4242
    assert spec["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "p"}
    assert spec["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL", "KILL"],
        "add": ["NET_BIND_SERVICE"],
    }
    assert violations(spec) == []


def test_read_only_root_with_a_scratch_tmp_in_every_container():
    j = job(INIT_AND_EXTRA, "sidecar")
    for spec in _pod_specs(j):
        assert {"name": render.SCRATCH_VOLUME, "emptyDir": {}} in spec["volumes"]
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert {"name": render.SCRATCH_VOLUME, "mountPath": "/tmp"} in c["volumeMounts"]
    trainer = render.pod(j, "worker", 0)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert (
        env["HOME"] == "/tmp" and env["MPLCONFIGDIR"].startswith("/tmp/") and env["XDG_CACHE_HOME"].startswith("/tmp/")
    )


def test_a_template_that_mounts_its_own_tmp_or_sets_home_keeps_them():
    template = {
        "spec": {
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
            "containers": [
                {
                    "name": "agents",
                    "env": [{"name": "HOME", "value": "/home/me"}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
                }
            ],
        }
    }
    trainer = render.pod(job(template), "worker", 0)["spec"]["containers"][0]
    assert [m["name"] for m in trainer["volumeMounts"] if m["mountPath"] == "/tmp"] == ["scratch"]
    assert [e["value"] for e in trainer["env"] if e["name"] == "HOME"] == ["/home/me"]


def test_no_service_account_token_unless_the_template_names_an_account():
    for spec in _pod_specs(job(INIT_AND_EXTRA, "remote")):
        assert spec["automountServiceAccountToken"] is False
    named = {"spec": {"serviceAccountName": "trainer", "containers": [{"name": "agents"}]}}
    assert "automountServiceAccountToken" not in render.pod(job(named), "worker", 0)["spec"]


def test_metrics_port_is_open_to_the_operators_pods_only():
    j = job()
    assert [r["ports"][0]["port"] for r in render.network_policy(j)["spec"]["ingress"]] == [2222]  # offline: nobody
    options = render.RenderOptions(operator_namespace="ops", operator_pod_labels=(("app", "agents-operator"),))
    _, metrics = render.network_policy(j, options)["spec"]["ingress"]
    assert metrics == {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                "podSelector": {"matchLabels": {"app": "agents-operator"}},
            }
        ],
        "ports": [{"port": 9090, "protocol": "TCP"}],
    }


def test_tensorboard_is_open_to_its_own_namespace_only():
    j = job(storage={"persistentVolumeClaim": {"claimName": "runs"}}, tensorboard={"enabled": True})
    deployment, _, policy = render.tensorboard(j)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["podSelector"] == {"matchLabels": labels}
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"port": render.TENSORBOARD_PORT, "protocol": "TCP"}]}
    ]
    assert policy in render.non_pod_children(j)


def _manifest(pod_security: str) -> dict:
    return {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "pj", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"podSecurity": pod_security, "replicaSpecs": {"worker": {"replicas": 1}}},
    }


def test_a_privileged_job_fails_unrendered_unless_the_operator_allows_it():
    plan = reconcile.plan(_manifest("Privileged"), [], now=NOW)
    assert plan.of(Create) == []
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PrivilegedNotAllowed"
    assert failed["message"].startswith("spec.podSecurity: Privileged is not allowed")
    allowed = reconcile.plan(_manifest("Privileged"), [], now=NOW, allow_privileged=True)
    assert [a.kind for a in allowed.of(Create)].count("Pod") == 1
    assert [a.kind for a in reconcile.plan(_manifest("Restricted"), [], now=NOW).of(Create)].count("Pod") == 1


def test_the_local_launcher_keeps_the_users_home_and_caches():
    """/tmp as HOME is for the pod's read-only root; a local process keeps the user's own."""
    evaluator = job(
        storage={"persistentVolumeClaim": {"claimName": "runs"}}, replicaSpecs={"worker": {}, "evaluator": {}}
    )
    container = render.pod(evaluator, "evaluator", 0)["spec"]["containers"][0]
    assert set(render.SCRATCH_ENV) <= {e["name"] for e in container["env"]}
    (replica,) = [r for r in local.plan(evaluator, Path("/tmp/run")) if r.type == "evaluator"]
    assert not set(render.SCRATCH_ENV) & set(replica.env)
