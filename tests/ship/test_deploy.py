"""The kustomize manifests in deploy/, built by a real kubectl and held to what the Helm chart renders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ship import manifests, tools

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = ROOT / "charts" / "agents-operator"
JOBS_NAMESPACE = "agents-jobs"


@pytest.fixture(scope="module")
def built(kubectl, tool_home) -> dict[str, list[dict]]:
    return {
        name: manifests.documents(tools.run(kubectl, "kustomize", str(DEPLOY / path), home=tool_home))
        for name, path in (("base", "base"), ("namespaced", "overlays/namespaced"))
    }


@pytest.fixture(scope="module")
def chart(helm, tool_home) -> dict[str, list[dict]]:
    """The chart with the values that match each kustomization."""
    common = ["template", "agents-operator", str(CHART), "--namespace", "agents-system"]
    namespaced = ["--set", "watch.allNamespaces=false", "--set", f"watch.namespaces={{{JOBS_NAMESPACE}}}"]
    return {
        "base": manifests.documents(tools.run(helm, *common, home=tool_home)),
        "namespaced": manifests.documents(tools.run(helm, *common, *namespaced, home=tool_home)),
    }


def _by_key(docs: list[dict]) -> dict[tuple[str, str, str | None], dict]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs}


def test_crd_copy_is_the_generated_crd():
    assert (DEPLOY / "base" / "agentsjob-crd.yaml").read_bytes() == (ROOT / "crds" / "agentsjob.yaml").read_bytes(), (
        "run `make crd`"
    )


@pytest.mark.parametrize("name", ["base", "namespaced"])
def test_every_object_is_valid(built, name):
    manifests.validate(built[name], custom={})


@pytest.mark.parametrize("name", ["base", "namespaced"])
def test_same_objects_as_the_chart(built, chart, name):
    ours, helm = _by_key(built[name]), _by_key(chart[name])
    extra = {k for k in ours if k[0] not in ("Namespace", "CustomResourceDefinition")}
    assert extra == set(helm)
    for key, obj in ours.items():
        if key not in helm:
            continue
        other = helm[key]
        for field in ("rules", "roleRef", "subjects"):
            assert obj.get(field) == other.get(field), (key, field)
        if key[0] == "Service":
            assert obj["spec"]["ports"] == other["spec"]["ports"]
        if key[0] == "Deployment":
            assert obj["spec"]["template"]["spec"] == other["spec"]["template"]["spec"]
            assert obj["spec"]["strategy"] == other["spec"]["strategy"]


def test_namespaced_overlay_has_no_cluster_roles(built):
    kinds = {d["kind"] for d in built["namespaced"]}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    roles = [d for d in built["namespaced"] if d["kind"] in ("Role", "RoleBinding")]
    assert len(roles) == 4 and {r["metadata"]["namespace"] for r in roles} == {JOBS_NAMESPACE}


@pytest.mark.parametrize("name", ["base", "namespaced"])
def test_operator_args_are_accepted_by_the_cli(built, name):
    (deployment,) = [d for d in built[name] if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert manifests.parse_run_args(args).command == "run"


def test_namespaces_run_restricted_pods(built):
    namespaces = [d for d in built["namespaced"] if d["kind"] == "Namespace"]
    assert {n["metadata"]["name"] for n in namespaces} == {"agents-system", JOBS_NAMESPACE}
    for namespace in namespaces:
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
