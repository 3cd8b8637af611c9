"""Every CustomResourceDefinition the project ships is created on the real API server.

The API server compiles each CEL rule and checks it against its section's `default` as written; a CRD that
fails is refused (422) and nothing installs. Each shipped copy (crds/, the chart's crds/, deploy/) is created
for real under a group of its own, so that the test never touches the cluster's own AgentsJobs, then deleted.
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from tests.e2e.cluster import wait_for
from tests.e2e.installs import CRD_PATH, ROOT, established


def shipped_crds() -> list[tuple[str, dict]]:
    out = []
    for folder in ("crds", "charts/agents-operator/crds", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.yaml")):
            for i, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
                if doc.get("kind") == "CustomResourceDefinition":
                    out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


SHIPPED = shipped_crds()


def test_every_kind_of_shipped_crd_is_found():
    names = {doc["metadata"]["name"] for _, doc in SHIPPED}
    assert names == {"agentsjobs.agents.dev", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    assert {where.split("/")[0] for where, _ in SHIPPED} == {"crds", "charts", "deploy"}


@pytest.mark.parametrize(("where", "doc"), SHIPPED, ids=[w for w, _ in SHIPPED])
def test_shipped_crd_is_accepted_and_established(kube, where, doc):
    crd = yaml.safe_load(yaml.safe_dump(doc))
    group = f"e2e{uuid.uuid4().hex[:8]}.{crd['spec']['group']}"
    crd["spec"]["group"] = group
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    name = crd["metadata"]["name"]
    kube.request("POST", CRD_PATH, body=crd)  # refused (422) when a rule fails on a default
    try:
        wait_for(lambda: established(kube, name), 30, f"{where} established")
    finally:
        kube.request("DELETE", f"{CRD_PATH}/{name}")
