"""The trainer package itself (trainer/__init__.py): gRPC's fork support is off unless asked for, so that a
process using gRPC can still fork and exec (ffmpeg, for videos)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

FORK_AFTER_GRPC = """
import os, subprocess
from agents_operator.trainer.envserver import server  # imports grpc as the trainer and the env server do
import grpc

service = server.EnvService("Pendulum-v1", 1, envs_per_process=1)
grpc_server, port = server.start(service, 0)
with grpc.insecure_channel(f"localhost:{port}") as channel:
    grpc.channel_ready_future(channel).result(timeout=30)
    # What imageio does to start ffmpeg: fork, setpgrp, exec.
    codes = [subprocess.Popen(["true"], preexec_fn=os.setpgrp).wait() for _ in range(100)]
grpc_server.stop(0).wait()
service.close()
print("failed children:", sum(code != 0 for code in codes))
"""


def test_a_process_using_grpc_can_fork_and_exec() -> None:
    """grpcio's default fork support can kill a forked child before it execs (it killed ffmpeg's, for videos)."""
    environment = {key: value for key, value in os.environ.items() if key != "GRPC_ENABLE_FORK_SUPPORT"}
    environment["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
    result = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_GRPC], env=environment, capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 0, result.stderr
    assert "failed children: 0" in result.stdout, result.stdout + result.stderr
    assert "epoll_wait error" not in result.stderr


@pytest.mark.parametrize(("given", "expected"), [(None, "0"), ("1", "1")])
def test_the_trainer_turns_grpc_fork_support_off_unless_told_otherwise(given, expected):
    environment = {key: value for key, value in os.environ.items() if key != "GRPC_ENABLE_FORK_SUPPORT"}
    if given is not None:
        environment["GRPC_ENABLE_FORK_SUPPORT"] = given
    code = "import os, agents_operator.trainer; print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])"
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
