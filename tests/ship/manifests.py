"""Checks shared by the chart and kustomize tests: schema validation and the RBAC the operator needs."""

from __future__ import annotations

import kubernetes_validate
import yaml

from agents_operator import cli, kube, naming

KUBERNETES_VERSION = "1.35.0"
"""The version of the helm and kubectl under test (their client libraries are 1.35)."""

NEEDED = {
    # (apiGroup, resource): verbs, from what kube.py and handlers.py do
    (naming.GROUP, naming.PLURAL): {"get", "list", "watch", "patch", "delete"},  # watch, kopf's marks, TTL
    (naming.GROUP, f"{naming.PLURAL}/status"): {"patch"},
    ("", "pods"): {"list", "watch", "create", "patch", "delete"},  # index, create, restart mark, delete
    ("", "services"): {"list", "watch", "create", "delete"},
    ("apps", "deployments"): {"list", "watch", "create", "delete"},  # TensorBoard
    ("networking.k8s.io", "networkpolicies"): {"list", "watch", "create", "delete"},  # the job's gRPC port
    ("", "events"): {"create"},
}


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate(docs: list[dict], custom: dict[str, dict]) -> None:
    """Validate every built-in object against the Kubernetes schemas (strict: no unknown fields); custom
    resources only against a CRD in `custom` (kind -> CRD): group and scope."""
    for doc in docs:
        api_version, kind = doc["apiVersion"], doc["kind"]
        if kind in custom:
            crd = custom[kind]
            assert api_version.split("/")[0] == crd["spec"]["group"], doc
            assert ("namespace" in doc["metadata"]) == (crd["spec"]["scope"] == "Namespaced"), doc
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def granted(rules: list[dict]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def application_resources() -> set[tuple[str, str]]:
    """(group, resource) of every kind kube.py writes, so that a new kind fails the RBAC tests."""
    return {(group, plural) for group, _, plural in kube.RESOURCES.values()}


def parse_run_args(args: list[str]):
    """The operator Deployment's arguments as `agents-operator` parses them (argparse exits on an unknown flag)."""
    return cli.build_parser().parse_args(args)
