"""Fixtures of the node suite: the chart installed on a real node, its operator running there as two pods of its
Deployment (peering), a Pod Security "restricted" namespace per test.

Runs when AGENTS_NODE_KUBECONFIG names the node's kubeconfig and AGENTS_NODE_IMAGE_TAG the tag of both images
loaded into it: `make e2e-node` builds and loads them (tools/node_images.py), starts ../shared/node and sets
both. The chart is installed with its defaults except the image tag and pull policy and two replicas with
peering; the jobs' pods run the trainer image the operator names by default.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from agents_operator.kube import Kube
from tests.e2e import installs
from tests.e2e.cluster import skipped_module, wait_for
from tests.node.node import Namespace

KUBECONFIG = os.environ.get("AGENTS_NODE_KUBECONFIG")
IMAGE_TAG = os.environ.get("AGENTS_NODE_IMAGE_TAG")
RELEASE = "agents"
RELEASE_NAMESPACE = "agents-system"
OPERATOR_REPLICAS = 2
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}

SKIP_REASON = (
    "AGENTS_NODE_KUBECONFIG and AGENTS_NODE_IMAGE_TAG are not set: the node suite needs a real node with the "
    "images loaded (`make e2e-node` does all of it)"
)


WithoutNode = skipped_module(SKIP_REASON)


def pytest_pycollect_makemodule(module_path, parent):
    return None if KUBECONFIG and IMAGE_TAG else WithoutNode.from_parent(parent, path=module_path)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/node" in str(item.fspath):
            item.add_marker(pytest.mark.node)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows what the serving operator pod logged."""
    outcome = yield
    report = outcome.get_result()
    install = item.funcargs.get("operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(install, OperatorPods):
        report.sections.append(("operator logs (tail)", install.logs(80)))


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    client = Kube.connect(kubeconfig=KUBECONFIG)
    yield client
    client.close()


@pytest.fixture(scope="session")
def tool_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tool-home")


@pytest.fixture(scope="session")
def kubectl(tool_home) -> Callable[..., str]:
    """The real kubectl against the node's control plane: its stdout, or a test failure with its stderr."""
    return lambda *args, stdin=None: installs.run_tool(
        "kubectl", *args, kubeconfig=KUBECONFIG, home=tool_home, stdin=stdin
    )


class OperatorPods:
    """The chart's operator as the node runs it: the Deployment's pods."""

    def __init__(self, kube: Kube, kubectl: Callable[..., str], install: installs.Install):
        self.kube = kube
        self.kubectl = kubectl
        self.install = install

    def pods(self) -> list[dict]:
        selector = self.install.manifest(self.kube)["spec"]["selector"]["matchLabels"]
        return self.kube.list("Pod", self.install.namespace, selector)

    def ready(self) -> list[dict]:
        """The Deployment's pods that are Ready, once every pod there runs the installed image (an upgrade
        of an earlier run's release has finished rolling: no old operator serves any more)."""
        pods = self.pods()
        image = self.install.manifest(self.kube)["spec"]["template"]["spec"]["containers"][0]["image"]
        if any(c["image"] != image for p in pods for c in p["spec"]["containers"]):
            return []
        return [p for p in pods if not p["metadata"].get("deletionTimestamp") and _ready(p)]

    def wait_ready(self, count: int = OPERATOR_REPLICAS, timeout: float = 180) -> list[dict]:
        return wait_for(lambda: len(pods := self.ready()) >= count and pods, timeout, f"{count} operator pods ready")

    def logs(self, lines: int = 60) -> str:
        out = []
        for pod in self.pods():
            name = pod["metadata"]["name"]
            try:
                text = self.kubectl("--namespace", self.install.namespace, "logs", name, f"--tail={lines}")
            except BaseException as err:  # a pod that never started has no log: say so instead
                text = f"(no log: {err})"
            out.append(f"--- {name}\n{text}")
        return "\n".join(out)


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def operator(kube, kubectl, tool_home) -> Iterator[OperatorPods]:
    """`helm install` of the chart: defaults but the image tag, the pull policy and two peering replicas."""
    for path in sorted((installs.ROOT / "crds").glob("*.yaml")):  # an older CRD of an earlier run: updated
        obj = yaml.safe_load(path.read_text())
        installs.apply(kube, f"{installs.CRD_PATH}/{obj['metadata']['name']}", obj)
    sets = [
        f"image.tag={IMAGE_TAG}",
        "image.pullPolicy=Never",
        f"replicaCount={OPERATOR_REPLICAS}",
        "peering.enabled=true",
    ]
    install = installs.helm_install(RELEASE, RELEASE_NAMESPACE, KUBECONFIG, tool_home, *sets)
    pods = OperatorPods(kube, kubectl, install)
    pods.wait_ready()
    yield pods
    installs.helm_uninstall(RELEASE, RELEASE_NAMESPACE, KUBECONFIG, tool_home)
    installs.delete_namespace(kube, RELEASE_NAMESPACE)


@pytest.fixture
def namespace(kube, kubectl, operator) -> Iterator[Namespace]:
    """A namespace of its own that enforces Pod Security "restricted", served by the chart's operator."""
    name = f"agents-node-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}
    kube.request("POST", "/api/v1/namespaces", body=body)
    yield Namespace(kube, name, kubectl)
    installs.delete_namespace(kube, name)
    for pv in kube.request("GET", "/api/v1/persistentvolumes", query={"labelSelector": f"agents.dev/node-test={name}"})[
        "items"
    ]:
        kube.request("DELETE", f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
