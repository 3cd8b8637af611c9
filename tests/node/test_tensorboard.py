"""The job's TensorBoard Deployment on a real pod: it answers over `kubectl port-forward` with the run's scalars,
read from the job's volume while the job trains."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request

from agents_operator import naming
from tests.node import conftest
from tests.node.node import CLAIM, until
from tests.ship import tools


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_tensorboard_answers_over_port_forward_with_the_runs_scalars(namespace, tmp_path):
    ns = namespace
    ns.provide_volume(tmp_path / "volume")
    job = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "board"},
        "spec": {
            "trainer": {"preset": "pendulum", "totalSteps": 40960, "videoEpisodes": 0, "evalEpisodes": 2},
            "replicaSpecs": {"ps": {"replicas": 1}, "worker": {"replicas": 1}},
            "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
            "tensorboard": {"enabled": True},
            "runPolicy": {"backoffLimit": 2},
        },
    }
    ns.apply(job)
    ns.wait_running("board", 2)
    deployment = naming.tensorboard_name("board")
    until(lambda: ns.kubectl("get", "deployment", deployment, "-o", "jsonpath={.status.readyReplicas}") == "1",
          240, "TensorBoard ready")  # fmt: skip
    port = _free_port()
    command = [str(tools.layer_binary("kubectl")), "--kubeconfig", conftest.KUBECONFIG, "--namespace", ns.ns]
    forward = subprocess.Popen(
        [*command, "port-forward", f"deployment/{deployment}", f"{port}:6006"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/tags"
        tags = until(lambda: (t := _get(url)) and any(t.values()) and t, 300, f"scalars at {url}")
        (run,) = [r for r, scalars in tags.items() if scalars]  # the chief's run: the job's run directory
        assert any(tag.startswith("train/") or "return" in tag for tag in tags[run]), tags
    finally:
        forward.terminate()
        forward.wait(10)
    assert ns.job("board")["status"]["tensorboardURL"].startswith(f"http://{deployment}.{ns.ns}.svc")
    ns.wait_state("board", "Succeeded", 600)
