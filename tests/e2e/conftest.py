"""Fixtures of the real-cluster suite: a namespace per test, the CRD applied, the operator in-process.

Runs only when AGENTS_E2E_KUBECONFIG names a kubeconfig (kind, minikube, or a bare kube-apiserver). Pods are
pinned to a node that does not exist, so no kubelet ever runs or touches them, and the tests move them
through their phases by patching pod status, as a kubelet would.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

KUBECONFIG = os.environ.get("AGENTS_E2E_KUBECONFIG")
ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NOWHERE = {"agents.dev/e2e": "no-such-node"}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube():
    if not KUBECONFIG:
        pytest.skip("AGENTS_E2E_KUBECONFIG is not set: the e2e suite needs a real API server")
    from agents_operator.kube import Kube

    client = Kube.connect(kubeconfig=KUBECONFIG)
    yield client
    client.close()


@pytest.fixture(scope="session")
def crd(kube):
    """Apply crds/ (create, or replace the spec of an older one) and wait until it is established."""
    from agents_operator.kube import ApiError

    for path in sorted((ROOT / "crds").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        name = obj["metadata"]["name"]
        try:
            kube.request("POST", CRD_PATH, body=obj)
        except ApiError as err:
            if err.status != 409:
                raise
            kube.request("PATCH", f"{CRD_PATH}/{name}", body={"spec": obj["spec"]}, content_type=MERGE)
        wait_for(lambda name=name: _established(kube, name), 30, f"CRD {name} established")


MERGE = "application/merge-patch+json"


def _established(kube, name: str) -> bool:
    conditions = (kube.request("GET", f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@pytest.fixture
def namespace(kube, crd) -> Iterator[str]:
    name = f"agents-e2e-{uuid.uuid4().hex[:8]}"
    kube.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")


class Operator:
    """The operator in a thread of its own (as `agents-operator run` would run it), serving one namespace."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.thread: threading.Thread | None = None
        self.stop_flag = threading.Event()
        self.controllers: list = []

    def start(self) -> Operator:
        from agents_operator import operator_main

        self.stop_flag = threading.Event()
        ready = threading.Event()
        options = operator_main.OperatorOptions(
            namespaces=[self.namespace], kubeconfig=KUBECONFIG, progress_interval=2.0, watch_timeout=60
        )
        self.thread = threading.Thread(
            target=lambda: asyncio.run(
                operator_main.serve(
                    options, stop_flag=self.stop_flag, ready_flag=ready, controller_hook=self.controllers.append
                )
            ),
            name="operator",
            daemon=True,
        )
        self.thread.start()
        assert ready.wait(30), "the operator did not start"
        return self

    def stop(self) -> None:
        self.stop_flag.set()
        if self.thread:
            self.thread.join(30)
            assert not self.thread.is_alive(), "the operator did not stop"


@pytest.fixture
def operator(namespace) -> Iterator[Operator]:
    op = Operator(namespace).start()
    yield op
    op.stop()


def wait_for(check: Callable[[], object], timeout: float = 30, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(0.2)
