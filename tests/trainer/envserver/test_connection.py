"""One env server's connection (envserver/connection.py): a killed server is reconnected and its episode cut; a
refusal is an error at once, never retried."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError
from tests.trainer.envserver.servers import FAST, ServerProcess, random_actions, serving

pytestmark = pytest.mark.timeout(60)


def test_a_killed_server_is_reconnected_and_its_episode_discarded() -> None:
    """SIGKILL mid-episode, restart on the same port: one cut transition, then a clean new episode."""
    options = ("--env", "Pendulum-v1", "--envs", 2, "--envs-per-process", 2, "--seed", 3, "--max-episode-steps", 10)
    original = ServerProcess(*options, "--port", 0)
    restarting = ThreadPoolExecutor(1)
    restarted = None
    actions = random_actions(16, 2)
    try:
        with RemoteBatchEnv([original.address], **FAST) as env:
            env.reset()
            before = [env.step(action) for action in actions[:4]][-1].observations
            original.stop()
            # The new server comes up while the client is already retrying.
            restarted = restarting.submit(ServerProcess, *options, "--port", original.port)
            cut = env.step(actions[4])
            after = [env.step(action) for action in actions[5:]]
        with BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3, max_episode_steps=10) as fresh:
            first = fresh.reset()
            expected = [fresh.step(action) for action in actions[5:]]
    finally:
        original.stop()
        if restarted is not None:
            restarted.result().stop()
        restarting.shutdown()
    assert cut.truncated.all() and not cut.terminated.any() and not cut.rewards.any()
    np.testing.assert_array_equal(cut.final_observations, before)
    np.testing.assert_array_equal(cut.observations, first)
    assert cut.episode_returns == [] and cut.episode_lengths == []
    # After the cut the batch is exactly a fresh one: the first episodes to end are whole (length 10).
    for got, want in zip(after, expected, strict=True):
        for name, value in vars(want).items():
            np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
    assert [result.episode_lengths for result in after if result.episode_lengths] == [[10, 10]]


def test_the_client_gets_a_refusal_at_once_as_an_error() -> None:
    with serving("Pendulum-v1", 1) as address, RemoteBatchEnv([address], **FAST) as env:
        env.reset()
        started = time.monotonic()
        with pytest.raises(EnvServerError, match=r"INVALID_ARGUMENT: Step: actions\[0, 0\] is nan"):
            env.step(np.full((1, 1), np.nan))
        assert time.monotonic() - started < 2  # not retried
