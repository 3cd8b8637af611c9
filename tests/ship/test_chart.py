"""The Helm chart, rendered by a real helm and validated against the Kubernetes schemas."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agents_operator import __version__, naming
from tests.ship import manifests, tools

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agents-operator"
NAMESPACE = "agents-system"

CLUSTER = ()
NAMESPACED = ("watch.allNamespaces=false", "watch.namespaces={team-a,team-b}")
HA = ("replicaCount=2", "peering.enabled=true")
EVERYTHING = (
    *HA,
    "metrics.serviceMonitor.enabled=true",
    "logging.format=json",
    "logging.verbose=true",
    "trainerImage=registry.example/agents:gpu",
    "imagePullSecrets[0].name=regcred",
    "podSecurity.allowPrivilegedJobs=true",
)
SCENARIOS = {
    "cluster": CLUSTER,
    "namespaced": NAMESPACED,
    "cluster-ha-everything": EVERYTHING,
    "namespaced-ha": (*NAMESPACED, *HA),
    "release-namespace-only": ("watch.allNamespaces=false",),
    "no-metrics-own-account": ("metrics.enabled=false", "serviceAccount.create=false", "serviceAccount.name=ops"),
}


def _template(helm: Path, home: Path, sets: tuple[str, ...]) -> list[dict]:
    args = ["template", "agents-operator", str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    for item in sets:
        args += ["--set", item]
    return manifests.documents(tools.run(helm, *args, home=home))


@pytest.fixture(scope="module")
def rendered(helm, tool_home) -> dict[str, list[dict]]:
    return {name: _template(helm, tool_home, sets) for name, sets in SCENARIOS.items()}


def _of(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _deployment(docs: list[dict]) -> dict:
    (deployment,) = _of(docs, "Deployment")
    return deployment


def _crds(docs: list[dict]) -> dict[str, dict]:
    return {d["spec"]["names"]["kind"]: d for d in _of(docs, "CustomResourceDefinition")}


# --- the chart as files ------------------------------------------------------------------------------------


def test_chart_crd_is_the_generated_crd():
    assert (CHART / "crds" / "agentsjob.yaml").read_bytes() == (ROOT / "crds" / "agentsjob.yaml").read_bytes(), (
        "run `make crd`"
    )


def test_app_version_is_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


def _keys(node: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        out.append(f"{prefix}{key}")
        if isinstance(value, dict):
            out += _keys(value, f"{prefix}{key}.")
    return out


def test_every_values_key_has_a_comment():
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    commented, uncommented = [], []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        stack = [(i, k) for i, k in stack if i < indent] + [(indent, key)]
        path = ".".join(k for _, k in stack)
        previous = lines[number - 1].strip() if number else ""
        (commented if previous.startswith("#") else uncommented).append(path)
    assert uncommented == []
    assert commented == _keys(yaml.safe_load("\n".join(lines)))  # the scan saw every key


@pytest.mark.parametrize("sets", [CLUSTER, NAMESPACED + HA], ids=["cluster", "namespaced-ha"])
def test_helm_lint_strict(helm, tool_home, sets):
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    tools.run(helm, *args, home=tool_home)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("replicaCount=2",), "needs peering.enabled"),
        (("watch.allNamespaces=false", "watch.namespaces={team-*}"), "not a namespace name"),
        (("logging.format=xml",), "logging.format must be plain or json"),
    ],
)
def test_bad_values_are_refused(helm, tool_home, sets, message):
    with pytest.raises(pytest.fail.Exception, match=message):
        _template(helm, tool_home, sets)


# --- what it renders ---------------------------------------------------------------------------------------


def test_every_rendered_object_is_valid(rendered):
    for docs in rendered.values():
        manifests.validate(docs, custom=_crds(docs) | {"ServiceMonitor": _SERVICE_MONITOR_CRD})


_SERVICE_MONITOR_CRD = {"spec": {"group": "monitoring.coreos.com", "scope": "Namespaced"}}


def test_crds_are_included(rendered):
    assert set(_crds(rendered["cluster"])) == {"AgentsJob", "ClusterKopfPeering", "KopfPeering"}


def test_cluster_mode_uses_cluster_roles_only(rendered):
    docs = rendered["cluster"]
    assert not _of(docs, "Role") and not _of(docs, "RoleBinding")
    roles = {r["metadata"]["name"]: r for r in _of(docs, "ClusterRole")}
    assert set(roles) == {"agents-operator-framework", "agents-operator-application"}
    for binding in _of(docs, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] in roles
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "agents-operator", "namespace": NAMESPACE}]


def test_namespaced_mode_uses_roles_in_each_watched_namespace(rendered):
    docs = rendered["namespaced-ha"]
    assert not _of(docs, "ClusterRole") and not _of(docs, "ClusterRoleBinding")
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in _of(docs, "Role")}
    bindings = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in _of(docs, "RoleBinding")}
    expected = {(ns, f"agents-operator-{g}") for ns in ("team-a", "team-b") for g in ("framework", "application")}
    assert roles == bindings == expected
    peerings = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in _of(docs, "KopfPeering")}
    assert peerings == {("team-a", "agents-operator"), ("team-b", "agents-operator")}


def test_namespaced_mode_defaults_to_the_release_namespace(rendered):
    docs = rendered["release-namespace-only"]
    assert {r["metadata"]["namespace"] for r in _of(docs, "Role")} == {NAMESPACE}
    assert "--namespace=agents-system" in _deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]


def _rules(docs: list[dict], group: str) -> list[dict]:
    kinds = ("ClusterRole", "Role")
    return [rule for d in docs if d["kind"] in kinds and d["metadata"]["name"].endswith(group) for rule in d["rules"]]


@pytest.mark.parametrize("scenario", ["cluster", "namespaced-ha"])
def test_application_rules_are_exactly_what_the_operator_does(rendered, scenario):
    rules = manifests.granted(_rules(rendered[scenario], "application"))
    assert rules == manifests.grants(cluster_wide=True, peering=False, rules="application")
    assert manifests.application_resources() <= set(manifests.NEEDED)


@pytest.mark.parametrize(
    ("scenario", "cluster_wide", "peering"),
    [("cluster", True, False), ("cluster-ha-everything", True, True), ("namespaced-ha", False, True)],
)
def test_framework_rules_are_the_documented_ones(rendered, scenario, cluster_wide, peering):
    rules = manifests.granted(_rules(rendered[scenario], "framework"))
    assert rules == manifests.grants(cluster_wide=cluster_wide, peering=peering, rules="framework")


def _container(docs: list[dict]) -> dict:
    (container,) = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_operator_args_are_accepted_by_the_cli(rendered, scenario):
    args = _container(rendered[scenario])["args"]
    parsed = manifests.parse_run_args(args)
    assert parsed.command == "run"


def test_args_follow_the_values(rendered):
    cluster = _container(rendered["cluster"])["args"]
    assert "--all-namespaces" in cluster and not any(a.startswith("--peering") for a in cluster)
    assert f"--trainer-image={naming.image(naming.TRAINER_IMAGE)}" in cluster
    everything = _container(rendered["cluster-ha-everything"])["args"]
    for arg in (
        "--peering=agents-operator",
        "--log-format=json",
        "--verbose",
        "--trainer-image=registry.example/agents:gpu",
    ):
        assert arg in everything
    namespaced = _container(rendered["namespaced"])["args"]
    assert "--namespace=team-a" in namespaced and "--namespace=team-b" in namespaced
    assert "--all-namespaces" not in namespaced


def test_the_operator_knows_its_pods_and_whether_privileged_jobs_run(rendered):
    """Job pods open their metrics port to the operator's pods: it learns their namespace (downward API) and
    labels (the Deployment's selector) from the chart; privileged jobs run only where the values say so."""
    deployment = _deployment(rendered["cluster"])
    container = _container(rendered["cluster"])
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    assert f"--operator-pod-labels={labels}" in container["args"]
    assert manifests.parse_run_args(container["args"]).operator_pod_labels == selector
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert "--allow-privileged-jobs" not in container["args"]
    assert "--allow-privileged-jobs" in _container(rendered["cluster-ha-everything"])["args"]


def test_probes_use_kopfs_liveness_endpoint(rendered):
    container = _container(rendered["cluster"])
    liveness = next(a for a in container["args"] if a.startswith("--liveness="))
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["health"]
    assert liveness == f"--liveness=http://0.0.0.0:{port}/healthz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_pod_security_restricted(rendered):
    pod = _deployment(rendered["cluster"])["spec"]["template"]["spec"]
    container = _container(rendered["cluster"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_without_peering_pods_never_overlap(rendered):
    assert _deployment(rendered["cluster"])["spec"]["strategy"] == {"type": "Recreate"}
    assert "strategy" not in _deployment(rendered["cluster-ha-everything"])["spec"]


def test_metrics_service_and_service_monitor(rendered):
    docs = rendered["cluster-ha-everything"]
    (service,) = _of(docs, "Service")
    (monitor,) = _of(docs, "ServiceMonitor")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"] == _deployment(docs)["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    off = rendered["no-metrics-own-account"]
    assert not _of(off, "Service") and not _of(off, "ServiceMonitor") and not _of(off, "ServiceAccount")
    assert not any(a.startswith("--metrics-port") for a in _container(off)["args"])
    assert _deployment(off)["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
