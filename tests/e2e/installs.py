"""The operator installed as users install it, and run as its Deployment would run it.

`helm install` of the chart (or `kubectl apply -k deploy/...`) puts the CRD, the ServiceAccount, its RBAC and the
operator Deployment on the API server. No kubelet runs the Deployment's pod there, so `DeployedOperator` is its
kubelet: it reads the Deployment back from the API server and starts its container's command line, with the
container's environment, as a process here, logged in as the Deployment's ServiceAccount (a token from the
TokenRequest API in a kubeconfig). Nothing is added for the tests: what the chart runs is what runs, and the
RBAC it grants is all the operator has.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import yaml

from agents_operator.kube import ApiError, Kube
from tests.ship import tools

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agents-operator"
OPERATOR_CONTAINER = "operator"
TOKEN_SECONDS = 3600
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def run_tool(name: str, *args: str, kubeconfig: str, home: Path, stdin: str | None = None) -> str:
    """helm or kubectl (the real ones, from the test extras) against the cluster of `kubeconfig`."""
    return tools.run(tools.layer_binary(name), *args, "--kubeconfig", kubeconfig, home=home, stdin=stdin)


def apply(kube: Kube, path: str, obj: dict) -> dict:
    """Server-side apply, as `kubectl apply --server-side --force-conflicts` does."""
    return kube.request(
        "PATCH",
        path,
        body=obj,
        query={"fieldManager": "agents-e2e", "force": "true"},
        content_type=APPLY,
    )


def established(kube: Kube, name: str) -> bool:
    conditions = (kube.request("GET", f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class Install:
    """Where an install put the operator: the Deployment and its ServiceAccount."""

    namespace: str
    deployment: str

    def manifest(self, kube: Kube) -> dict:
        return kube.request("GET", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}")

    def account(self, kube: Kube) -> str:
        return self.manifest(kube)["spec"]["template"]["spec"]["serviceAccountName"]

    def park(self, kube: Kube) -> None:
        """Scale the Deployment to 0: on a cluster with kubelets its pod would serve the same jobs as the
        process the tests run in its place."""
        kube.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}/scale",
            body={"spec": {"replicas": 0}},
            content_type=MERGE,
        )


def helm_install(release: str, namespace: str, kubeconfig: str, home: Path, *sets: str) -> Install:
    """`helm upgrade --install` of the chart (values as given, otherwise its defaults), once a namespace of the
    same name left by an earlier run has finished terminating."""
    kube = Kube.connect(kubeconfig=kubeconfig)
    try:
        deadline = time.monotonic() + 120
        while _terminating(kube, namespace):
            assert time.monotonic() < deadline, f"namespace {namespace} is still terminating"
            time.sleep(0.5)
    finally:
        kube.close()
    args = ["upgrade", "--install", release, str(CHART), "--namespace", namespace, "--create-namespace"]
    for item in sets:
        args += ["--set", item]
    run_tool("helm", *args, kubeconfig=kubeconfig, home=home)
    name = release if "agents-operator" in release else f"{release}-agents-operator"
    return Install(namespace, name)


def helm_uninstall(release: str, namespace: str, kubeconfig: str, home: Path) -> None:
    run_tool(
        "helm", "uninstall", release, "--namespace", namespace, "--ignore-not-found", kubeconfig=kubeconfig, home=home
    )


def service_account_kubeconfig(kube: Kube, admin_kubeconfig: str, namespace: str, account: str, out: Path) -> Path:
    """A kubeconfig for the cluster of `admin_kubeconfig`, logged in as a ServiceAccount (TokenRequest API)."""
    token = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )["status"]["token"]
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    if "certificate-authority" in cluster:  # a relative path would break beside `out`
        authority = Path(admin_kubeconfig).parent / cluster["certificate-authority"]
        cluster = {**cluster, "certificate-authority": str(authority)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "cluster", "user": account, "namespace": namespace}}],
        "current-context": account,
    }
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


def _container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == OPERATOR_CONTAINER)


def _environment(container: dict, pod_name: str, namespace: str) -> dict[str, str]:
    """The container's environment as a kubelet would set it (values and the pod's own name and namespace)."""
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"the e2e kubelet cannot provide {var}"
            env[var["name"]] = fields[path]
    return env


def _liveness_url(args: list[str]) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith("--liveness=")]
    parsed = urlparse(value)
    return f"http://127.0.0.1:{parsed.port}{parsed.path}"


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _other_host(args: list[str], offset: int) -> list[str]:
    """A second replica's args on this one machine: its ports moved by `offset`, as if it had a network
    namespace of its own (two pods do; two processes here share one)."""

    def move(port: re.Match) -> str:
        return str(int(port.group(0)) + offset)

    listening = ("--liveness=", "--metrics-port=")
    return [re.sub(r"(?<=[:=])\d+(?=/|$)", move, a) if a.startswith(listening) else a for a in args]


class DeployedOperator:
    """The operator of an install, run here with the args and env of its Deployment and as its ServiceAccount.

    `replica` > 0 is another pod of the same Deployment (peering): its own pod name, and its ports moved so
    that it can listen beside the first on this one machine.
    """

    def __init__(self, kube: Kube, install: Install, admin_kubeconfig: str, workdir: Path, replica: int = 0):
        self.kube = kube
        self.install = install
        self.admin_kubeconfig = admin_kubeconfig
        self.workdir = workdir
        self.pod_name = f"{install.deployment}-e2e-{replica}"
        self.process: subprocess.Popen | None = None
        self.log = workdir / f"{self.pod_name}.log"
        deployment = install.manifest(kube)
        container = _container(deployment)
        self.args: list[str] = list(container.get("command") or []) + list(container.get("args") or [])
        self.ports = [p["containerPort"] for p in container.get("ports", [])]
        if replica:
            self.args, self.ports = _other_host(self.args, replica), [p + replica for p in self.ports]
        self.env = _environment(container, self.pod_name, install.namespace)
        self.health = _liveness_url(self.args)
        self.account = install.account(kube)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60) -> DeployedOperator:
        assert not self.running, "already running"
        for port in self.ports:
            assert not _port_in_use(port), f"port {port} is taken here: the chart's operator listens on it"
        kubeconfig = self.kubeconfig()
        executable = Path(sys.executable).parent / "agents-operator"  # the image's ENTRYPOINT
        env = {**self.env, "KUBECONFIG": str(kubeconfig), "PATH": os.environ.get("PATH", "")}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        with self.log.open("a") as log:
            log.write(f"=== start: {' '.join(self.args)}\n")
            self.process = subprocess.Popen(
                [str(executable), *self.args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout
        while not self._healthy():
            assert self.running, f"the operator exited {self.process.returncode}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"the operator did not answer {self.health}:\n{self.tail()}"
            time.sleep(0.2)
        return self

    def kubeconfig(self) -> Path:
        """A kubeconfig logged in as the Deployment's ServiceAccount (a fresh token)."""
        path = self.workdir / f"{self.pod_name}.kubeconfig"
        return service_account_kubeconfig(self.kube, self.admin_kubeconfig, self.install.namespace, self.account, path)

    def metric(self, name: str) -> float:
        """One sample of the operator's own /metrics (the sum over its labels)."""
        (port,) = [a.split("=", 1)[1] for a in self.args if a.startswith("--metrics-port=")]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith((f"{name} ", f"{name}{{")))

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, as the kubelet stops a pod; its exit code."""
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL: the operator dies at whatever it was doing (OOM kill, node loss)."""
        return self._end(signal.SIGKILL, 10)

    def _end(self, sig: int, timeout: float) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"the operator ignored {signal.Signals(sig).name} for {timeout} s") from None
        return self.process.returncode

    def refused(self) -> list[str]:
        """What RBAC refused the operator (403 `... is forbidden: User "..." cannot ...`), from its log."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines() if re.search(r'forbidden: User ".*" cannot', line)]

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _terminating(kube: Kube, name: str) -> bool:
    try:
        return kube.request("GET", f"/api/v1/namespaces/{name}")["status"].get("phase") == "Terminating"
    except ApiError as err:
        if err.status == 404:
            return False
        raise


def namespace_exists(kube: Kube, name: str) -> bool:
    try:
        kube.request("GET", f"/api/v1/namespaces/{name}")
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def delete_namespace(kube: Kube, name: str) -> None:
    try:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")
    except ApiError as err:
        if err.status != 404:
            raise
