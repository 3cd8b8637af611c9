"""`agents-operator local` keeps a job to this machine and to its own lifetime, and says why it cannot start.

Stand-in replicas (plain Python) listen as TensorFlow's servers do, on every interface, so these tests
run without TensorFlow.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from agents_operator import local, manifests, tfconfig
from tests.local.standins import alive, descendants
from tests.procnet import interfaces, listening

PY = sys.executable
LIKE_TF = """
    import signal, socket, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # hung: only SIGKILL ends it
    servers = []
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        server = socket.socket(family)
        server.bind((address, 0))  # every interface, as tf.distribute.Server listens
        server.listen()
        servers.append(server)
    time.sleep(300)
"""


def _manifest(tmp_path: Path) -> Path:
    container = {"name": "agents", "command": [PY, "-c", textwrap.dedent(LIKE_TF)]}
    template = {"spec": {"containers": [container]}}
    data = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "c"},
        "spec": {"replicaSpecs": {"ps": {"template": template}, "worker": {"replicas": 2, "template": template}}},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _start_local(tmp_path: Path, *options: str) -> subprocess.Popen:
    argv = [PY, "-m", "agents_operator", "local", str(_manifest(tmp_path)), "--no-video", *options]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints where a stuck launcher is
    return subprocess.Popen(
        [*argv, "--logdir", str(tmp_path / "run")],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_as_in_a_terminal,
    )


def _as_in_a_terminal() -> None:
    """Ctrl-C reaches the launcher as in a terminal, even when the tests were started in the background: a shell
    without job control starts background commands with SIGINT ignored, and Python then keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(launcher: subprocess.Popen, timeout: float) -> None:
    """SIGINT, as Ctrl-C; a launcher that has not ended after `timeout` s fails the test with its stacks."""
    launcher.send_signal(signal.SIGINT)
    try:
        launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        launcher.send_signal(signal.SIGABRT)
        _, stderr = launcher.communicate(timeout=30)
        raise AssertionError(f"the launcher did not stop within {timeout} s of SIGINT:\n{stderr}") from None


def _reachable_from_elsewhere(address, names: set[str]) -> bool:
    return not address.is_loopback and names != {"lo"}


def _replicas(launcher: subprocess.Popen, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        replicas = descendants(launcher.pid)
        if len(replicas) >= count and all(listening(pid) for pid in replicas):
            return replicas
        assert launcher.poll() is None, launcher.stderr.read()
        time.sleep(0.2)
    raise AssertionError(f"{count} replicas never all listened")


def test_nothing_a_local_run_serves_is_reachable_from_another_machine(tmp_path):
    launcher = _start_local(tmp_path)
    try:
        replicas = _replicas(launcher, 3)
        exposed = {
            pid: [str(a) for a in listening(pid) if _reachable_from_elsewhere(a, interfaces(pid))]
            for pid in [launcher.pid, *replicas]
        }
        assert exposed == {pid: [] for pid in [launcher.pid, *replicas]}
        assert all(interfaces(pid) == {"lo"} for pid in replicas)
    finally:
        # The stand-ins ignore SIGTERM, so the launcher waits out its grace period before it SIGKILLs them;
        # how fast a stop is, is test_launcher's concern, not this test's.
        _stop(launcher, local.STOP_GRACE_SECONDS + 60)


def test_sigkill_of_the_launcher_ends_every_replica_within_seconds(tmp_path):
    launcher = _start_local(tmp_path)
    replicas = _replicas(launcher, 3)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in replicas) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in replicas if alive(pid)]
    for pid in left:  # leave nothing behind, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert left == []


def test_replicas_serve_their_own_endpoints_on_loopback(tmp_path):
    replicas = local.plan(_job(tmp_path), tmp_path)
    assert {r.env[tfconfig.BIND_HOST_VAR] for r in replicas} == {"127.0.0.1"}


def _job(tmp_path):
    return manifests.load_job(_manifest(tmp_path))


@pytest.mark.parametrize(
    ("in_the_way", "logdir", "reason"),
    [
        (True, "{base}/file", "{base}/file is in the way: it is a file, not a directory"),
        (True, "{base}/file/run", "{base}/file is in the way: it is a file, not a directory"),
        # sysfs refuses new files and directories to root as well (chmod does not stop root).
        (False, "/sys/agents-run", "cannot create it: (Operation not permitted|Permission denied)"),
        (False, "/sys", "cannot write in it: Permission denied"),
    ],
    ids=["a file", "a file above it", "cannot create", "not writable"],
)
def test_an_unusable_run_directory_is_one_line_naming_it_and_why(tmp_path, in_the_way, logdir, reason):
    if in_the_way:
        (tmp_path / "file").write_text("x")
    logdir = logdir.format(base=tmp_path)
    argv = [PY, "-m", "agents_operator", "local", str(_manifest(tmp_path)), "--logdir", logdir]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    expected = f"agents-operator local: error: run directory {logdir}: {reason.format(base=tmp_path)}"
    assert re.fullmatch(expected, line), line


def test_an_env_server_listens_where_the_launcher_says(tmp_path):
    argv = [PY, "-m", "agents_operator", "env-server", "--env", "Pendulum-v1", "--port", "0"]
    env = {**os.environ, tfconfig.BIND_HOST_VAR: local.LOOPBACK}
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "serving" in server.stdout.readline()
        assert [str(a) for a in listening(server.pid)] == [local.LOOPBACK]
    finally:
        server.terminate()
        server.wait(timeout=30)
