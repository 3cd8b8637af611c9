"""Env servers for the tests: in this process (`serving`) or as `agents-operator env-server` runs them
(`ServerProcess`); the client's options that make a test give up in seconds; raw calls to the service."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from agents_operator.trainer.envs.policy_message import policy_message
from agents_operator.trainer.envserver import protocol, server
from agents_operator.trainer.ppo.normalize import Normalizer
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

FAST = {"timeout": 10.0, "max_failures": 8, "startup_timeout": 30.0}  # the backoff totals ~20 s


@contextlib.contextmanager
def serving(env_id: str, num_envs: int, port: int = 0, **options: object) -> Iterator[str]:
    """An env server in this process (its environments in one subprocess); yields its address."""
    service = server.EnvService(env_id, num_envs, envs_per_process=num_envs, **options)
    grpc_server, bound = server.start(service, port)
    try:
        yield f"localhost:{bound}"
    finally:
        grpc_server.stop(0).wait()
        service.close()


class ServerProcess:
    """`agents-operator env-server` as its own process, as a sidecar or a remote pod runs it."""

    def __init__(self, *args: object):
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path or os.getcwd() for path in sys.path)}
        command = [sys.executable, "-m", "agents_operator.cli", "env-server", *map(str, args)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
        line = self.process.stdout.readline()
        assert "serving" in line, line
        self.port = int(line.rsplit(" ", 1)[1])
        self.address = f"localhost:{self.port}"

    def workers(self) -> set[int]:
        with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children") as children:
            return {int(pid) for pid in children.read().split()}

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def random_actions(steps: int, num_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, (steps, num_envs, 1)).astype(np.float32)  # some clip


LONG = 1000  # episodes of Pendulum (200 steps each): an evaluation of many seconds


class Raw:
    """The service called by hand, as a client other than RemoteBatchEnv (or a broken one) calls it."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)

    def call(self, method: str, message: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        return protocol.decode(self._callable(method)(protocol.encode(message), timeout=timeout))

    def future(self, method: str, message: dict[str, Any], timeout: float) -> grpc.Future:
        return self._callable(method).future(protocol.encode(message), timeout=timeout)

    def healthy(self, timeout: float) -> bool:
        check = self.channel.unary_unary(f"/{protocol.HEALTH_SERVICE}/{protocol.HEALTH_METHOD}")
        return check(b"", timeout=timeout) == protocol.HEALTH_SERVING

    def _callable(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        return self.channel.unary_unary(protocol.method_path(method))


def normalizer() -> Normalizer:
    return Normalizer((3,), ROLLOUT_CONFIG.clip_observations)


def evaluation(episodes: int, seed: int = 0) -> dict[str, Any]:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    return {**policy_message(policy, normalizer()), "episodes": episodes, "seed": seed}


def refusal(raw: Raw, method: str, message: dict[str, Any]) -> str:
    """The details of the INVALID_ARGUMENT with which the server refuses `message`."""
    with pytest.raises(grpc.RpcError) as refused:
        raw.call(method, message)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    details = refused.value.details()
    assert "\n" not in details
    return details
