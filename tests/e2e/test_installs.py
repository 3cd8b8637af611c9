"""Installed as users install it: the chart cluster-wide, namespaced and with peering, and `kubectl apply -k
deploy/...`; each time the installed operator runs under its own ServiceAccount and a job goes from creation
to success, and the account may do what docs/operations.md says and no more (SelfSubjectRulesReview).

The chart's default install is the suite's own operator (conftest); the other installs stop it for as long as
they run their own, since two operators must never serve one namespace.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agents_operator.kube import Kube
from agents_operator.peering import PeeringGate
from tests.e2e import installs
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.conftest import KUBECONFIG
from tests.ship import manifests

pytestmark = pytest.mark.timeout(300)

Triple = tuple[str, str, str]


def new_namespace(kube: Kube, prefix: str = "agents-e2e") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def may_do(kubeconfig: Path, namespace: str) -> set[Triple]:
    """(apiGroup, resource, verb) the kubeconfig's user may do in `namespace`, as the API server says."""
    client = Kube.connect(kubeconfig=str(kubeconfig))
    try:
        review = client.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": namespace},
            },
        )
    finally:
        client.close()
    assert not review["status"].get("incomplete"), review["status"]
    return {
        (group, resource, verb)
        for rule in review["status"]["resourceRules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def triples(grants: dict[tuple[str, str], set[str]]) -> set[Triple]:
    return {(group, resource, verb) for (group, resource), verbs in grants.items() for verb in verbs}


@pytest.fixture(scope="module")
def anybody(kube, tmp_path_factory) -> Iterator[Path]:
    """What any ServiceAccount with no binding of its own may do (self reviews): subtracted from the rest."""
    namespace = new_namespace(kube)
    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
    )
    path = installs.service_account_kubeconfig(
        kube, KUBECONFIG, namespace, "nobody", tmp_path_factory.mktemp("nobody") / "kubeconfig"
    )
    yield path
    installs.delete_namespace(kube, namespace)


def extra_rights(operator: installs.DeployedOperator, anybody: Path, namespace: str) -> set[Triple]:
    """What the operator's account may do beyond any account; it was never refused what it tried (RBAC enough)."""
    assert operator.refused() == []
    return may_do(operator.kubeconfig(), namespace) - may_do(anybody, namespace)


@pytest.fixture
def own_operator(kube, chart_operator) -> Iterator[list[installs.DeployedOperator]]:
    """Operators a test starts from an install of its own, the suite's operator stopped meanwhile."""
    chart_operator.stop()
    started: list[installs.DeployedOperator] = []
    yield started
    for op in started:
        op.stop()


def test_chart_cluster_wide(kube, operator, namespace, anybody):
    Cluster(kube, namespace).succeeds()
    expected = triples(manifests.grants(cluster_wide=True, peering=False))
    assert extra_rights(operator, anybody, namespace) == expected


def test_chart_namespaced_serves_only_its_namespace(kube, own_operator, tool_home, tmp_path, anybody):
    home, elsewhere = new_namespace(kube), new_namespace(kube)
    release = f"agents-e2e-ns-{home[-8:]}"
    try:
        install = installs.helm_install(release, home, KUBECONFIG, tool_home, "watch.allNamespaces=false")
        install.park(kube)
        op = installs.DeployedOperator(kube, install, KUBECONFIG, tmp_path)
        own_operator.append(op.start())
        Cluster(kube, elsewhere).create_job("other")
        Cluster(kube, home).succeeds()
        assert Cluster(kube, elsewhere).pods("other") == {}  # not served: no pods there
        assert extra_rights(op, anybody, home) == triples(manifests.grants(cluster_wide=False, peering=False))
        assert extra_rights(op, anybody, elsewhere) == set()
    finally:
        for op in own_operator:
            op.stop()
        installs.helm_uninstall(release, home, KUBECONFIG, tool_home)
        installs.delete_namespace(kube, home)
        installs.delete_namespace(kube, elsewhere)


def test_chart_with_peering_serves_from_one_replica_and_fails_over(kube, own_operator, namespace, tool_home, tmp_path):
    home = new_namespace(kube)
    release = f"agents-e2e-ha-{home[-8:]}"
    sets = ("replicaCount=2", "peering.enabled=true", f"peering.name={release}")
    try:
        install = installs.helm_install(release, home, KUBECONFIG, tool_home, *sets)
        install.park(kube)
        replicas = [installs.DeployedOperator(kube, install, KUBECONFIG, tmp_path, replica=i) for i in (0, 1)]
        own_operator.extend(op.start() for op in replicas)
        peering = f"/apis/kopf.dev/v1/clusterkopfpeerings/{release}"
        wait_for(lambda: len(kube.request("GET", peering).get("status") or {}) == 2, 60, "both replicas registered")
        cluster = Cluster(kube, namespace)
        cluster.started()
        created = [op.metric("agents_operator_children_created_total") for op in replicas]
        assert sorted(created) == [0, 8], created  # 3 pods, 3 Services, the NetworkPolicy and the ConfigMap, by one
        active, standby = (replicas[0], replicas[1]) if created[0] else (replicas[1], replicas[0])
        # what the replicas' own loops ask (resync, progress, retries) reads kopf's records as kopf does
        peers = kube.request("GET", peering)["status"]
        for op, serving in ((active, True), (standby, False)):
            gate = PeeringGate(kube, release, op.pod_name, peers[op.pod_name]["priority"], clusterwide=True)
            assert asyncio.run(gate.serves(namespace)) is serving, (op.pod_name, peers)
        active.stop()  # a rollout or a drained node: the standby takes over
        cluster.kube.delete("Pod", namespace, "pj-ps-0")  # only a serving operator replaces it
        wait_for(lambda: "pj-ps-0" in cluster.live_pods(), 90, "the standby replaced the pod")
        # the counter moves once the create's response is back, which may be after the pod is listed
        wait_for(lambda: standby.metric("agents_operator_children_created_total") >= 1, 30, "the standby counted it")
        assert (("kopf.dev", "clusterkopfpeerings", "patch")) in may_do(standby.kubeconfig(), namespace)
    finally:
        for op in own_operator:
            op.stop()
        installs.helm_uninstall(release, home, KUBECONFIG, tool_home)
        installs.delete_namespace(kube, home)


KUSTOMIZE_NAMESPACES = ("agents-system", "agents-jobs")
"""The namespaces deploy/ installs into."""


def kustomize_install(kube: Kube, kubectl, path: str) -> list[dict]:
    """`kubectl apply -k deploy/<path>`; the objects it made (refused on a cluster that has its own install)."""
    for name in KUSTOMIZE_NAMESPACES:
        if installs.namespace_exists(kube, name):
            pytest.skip(f"namespace {name} exists: this cluster has an install of deploy/ the test would replace")
    kubectl("apply", "-k", str(installs.ROOT / "deploy" / path))
    return [d for d in yaml.safe_load_all(kubectl("kustomize", str(installs.ROOT / "deploy" / path))) if d]


def kustomize_remove(kube: Kube, kubectl, objects: list[dict], tmp_path: Path) -> None:
    """Everything but the CRD (the cluster's AgentsJobs live in it), and wait until the namespaces are gone."""
    kept = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    listing = tmp_path / "remove.yaml"
    listing.write_text(yaml.safe_dump_all(kept))
    kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(listing))
    for name in KUSTOMIZE_NAMESPACES:
        wait_for(lambda name=name: not installs.namespace_exists(kube, name), 120, f"namespace {name} deleted")


@pytest.mark.parametrize(
    ("path", "jobs_namespace"), [("base", None), ("overlays/namespaced", "agents-jobs")], ids=["base", "namespaced"]
)
def test_kustomize(kube, own_operator, kubectl, tmp_path, anybody, path, jobs_namespace):
    objects = kustomize_install(kube, kubectl, path)
    try:
        install = installs.Install("agents-system", "agents-operator")
        install.park(kube)
        op = installs.DeployedOperator(kube, install, KUBECONFIG, tmp_path)
        own_operator.append(op.start())
        served = jobs_namespace or new_namespace(kube)
        Cluster(kube, served).succeeds()
        expected = triples(manifests.grants(cluster_wide=jobs_namespace is None, peering=False))
        assert extra_rights(op, anybody, served) == expected
        if jobs_namespace is None:
            installs.delete_namespace(kube, served)
    finally:
        for op in own_operator:
            op.stop()
        kustomize_remove(kube, kubectl, objects, tmp_path)
