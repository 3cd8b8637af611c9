"""Fixtures of the real-cluster suite: the CRD applied, the chart installed, its operator running, a namespace
per test.

Runs when AGENTS_E2E_KUBECONFIG names a kubeconfig: `.ci/run` starts the control plane in ../shared/kube and
sets it; `make e2e` uses your own cluster (kind, minikube) from KUBECONFIG. Pods are pinned to a node that
does not exist, so no kubelet ever runs or touches them, and the tests move them through their phases by
patching pod status, as a kubelet would.

The operator is the chart's: `helm install` with default values, then the installed Deployment's command line
and environment run here as its ServiceAccount (`installs.DeployedOperator`). One operator serves every
namespace, as the chart's default does; tests that stop or kill it get it back running for the next test.
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
from tests.e2e.cluster import Cluster, skipped_module, wait_for

KUBECONFIG = os.environ.get("AGENTS_E2E_KUBECONFIG")

RELEASE = "agents-e2e"
RELEASE_NAMESPACE = "agents-e2e-system"


SKIP_REASON = (
    "AGENTS_E2E_KUBECONFIG is not set: the e2e suite needs a real API server (.ci/run starts one; "
    "`make e2e` uses KUBECONFIG)"
)


WithoutCluster = skipped_module(SKIP_REASON)


def pytest_pycollect_makemodule(module_path, parent):
    # One skip raised here for every module: pytest folds them into a single line of its summary.
    return None if KUBECONFIG else WithoutCluster.from_parent(parent, path=module_path)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows what the operator logged."""
    outcome = yield
    report = outcome.get_result()
    operator = item.funcargs.get("operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(operator, installs.DeployedOperator):
        report.sections.append(("operator log (tail)", operator.tail(80)))


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    client = Kube.connect(kubeconfig=KUBECONFIG)
    yield client
    client.close()


@pytest.fixture(scope="session")
def crd(kube) -> None:
    """crds/ applied (created, or an older one updated) and established."""
    for path in sorted((installs.ROOT / "crds").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        name = obj["metadata"]["name"]
        installs.apply(kube, f"{installs.CRD_PATH}/{name}", obj)
        wait_for(lambda name=name: installs.established(kube, name), 30, f"CRD {name} established")


@pytest.fixture(scope="session")
def tool_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tool-home")


@pytest.fixture(scope="session")
def kubectl(tool_home) -> Callable[..., str]:
    """The real kubectl against the cluster: its stdout, or a test failure with its stderr."""
    return lambda *args: installs.run_tool("kubectl", *args, kubeconfig=KUBECONFIG, home=tool_home)


@pytest.fixture(scope="session")
def chart_install(kube, crd, tool_home) -> Iterator[installs.Install]:
    """`helm install` of the chart with its default values (the CRD is there already: helm skips it)."""
    install = installs.helm_install(RELEASE, RELEASE_NAMESPACE, KUBECONFIG, tool_home)
    install.park(kube)
    yield install
    installs.helm_uninstall(RELEASE, RELEASE_NAMESPACE, KUBECONFIG, tool_home)
    installs.delete_namespace(kube, RELEASE_NAMESPACE)


@pytest.fixture(scope="session")
def chart_operator(kube, chart_install, tmp_path_factory) -> Iterator[installs.DeployedOperator]:
    op = installs.DeployedOperator(kube, chart_install, KUBECONFIG, tmp_path_factory.mktemp("operator"))
    yield op
    op.stop()


@pytest.fixture
def operator(chart_operator) -> installs.DeployedOperator:
    """The chart's operator, running (again, if a test before stopped it)."""
    if not chart_operator.running:
        chart_operator.start()
    return chart_operator


@pytest.fixture
def namespace(kube, crd) -> Iterator[str]:
    name = f"agents-e2e-{uuid.uuid4().hex[:8]}"
    kube.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    installs.delete_namespace(kube, name)


@pytest.fixture
def cluster(kube, namespace, operator) -> Cluster:
    """A namespace of its own, served by the chart's operator."""
    return Cluster(kube, namespace)
