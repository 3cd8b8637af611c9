"""Checks shared by the chart and kustomize tests: schema validation and the RBAC the operator needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import kubernetes_validate
import yaml

from agents_operator import cli, kube

KUBERNETES_VERSION = "1.35.0"
"""The version of the helm and kubectl under test (their client libraries are 1.35)."""

DOCUMENTED_IN = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@dataclass(frozen=True)
class Grant:
    """A row of the permissions table of docs/operations.md."""

    rules: str
    """application or framework (the Role or ClusterRole it belongs to)."""
    when: frozenset[str]
    """always, or the install settings that add it: cluster-wide, namespaced, peering."""
    group: str
    resource: str
    verbs: frozenset[str]


def documented_grants() -> list[Grant]:
    """The operator's grants as docs/operations.md states them: the one list the RBAC tests hold installs to."""
    text = DOCUMENTED_IN.read_text()
    table = text[text.index("| rules | when |") :].split("\n\n")[0].splitlines()[2:]
    grants = []
    for line in table:
        rules, when, group, resource, verbs, _why = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        grants.append(
            Grant(
                rules,
                frozenset(w.strip() for w in when.split(",")),
                "" if group == "core" else group,
                resource,
                frozenset(v.strip() for v in verbs.split(",")),
            )
        )
    return grants


def grants(*, cluster_wide: bool, peering: bool, rules: str | None = None) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs the operator's account has in an install of that kind."""
    settings = {"always", "cluster-wide" if cluster_wide else "namespaced"} | ({"peering"} if peering else set())
    out: dict[tuple[str, str], set[str]] = {}
    for grant in documented_grants():
        if grant.when <= settings and rules in (None, grant.rules):
            out.setdefault((grant.group, grant.resource), set()).update(grant.verbs)
    return out


NEEDED = grants(cluster_wide=True, peering=False, rules="application")
NEEDED.setdefault(("", "events"), set()).add("create")
"""What kube.py and handlers.py do to jobs, their children and Events (posted about jobs, read about pods)."""


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
