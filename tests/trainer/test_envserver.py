"""The env server and its client: exact round trips, errors, restarts, shutdown, rollout mode, training."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.envserver import protocol, server
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError, EnvServerUnavailable
from agents_operator.trainer.ppo.normalize import Moments
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.training_env import TrainingEnv

from .cli import run
from .envserver_envs import RAISING
from .test_envs import wait_until_gone

pytestmark = pytest.mark.timeout(60)

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


def test_messages_round_trip_and_refuse_objects() -> None:
    message = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "nested": [np.array([True, False]), {"b": np.zeros((0, 4), np.int64)}],
        "scalar": np.float32(0.5),
        "text": "x",
        "none": None,
    }
    decoded = protocol.decode(protocol.encode(message))
    np.testing.assert_array_equal(decoded["a"], message["a"])
    assert decoded["a"].dtype == np.float32 and decoded["nested"][0].dtype == np.bool_
    assert decoded["nested"][1]["b"].shape == (0, 4)
    assert (decoded["scalar"], decoded["text"], decoded["none"]) == (0.5, "x", None)
    with pytest.raises(TypeError, match="dtype object"):
        protocol.encode({"a": np.array([object()])})
    forged = protocol.encode({"a": np.zeros(2)}).replace(b"<f8", b"|O8")
    with pytest.raises(protocol.ProtocolError, match="not accepted"):
        protocol.decode(forged)


def test_steps_match_a_local_batch_env_exactly() -> None:
    """Two servers (seeds 5 and 5 + 2) make one batch that steps exactly like BatchEnv(seed=5)."""
    actions = random_actions(45, 3)
    limit = {"max_episode_steps": 20}
    with (
        serving("Pendulum-v1", 2, seed=5, **limit) as first,
        serving("Pendulum-v1", 1, seed=7, **limit) as second,
        RemoteBatchEnv([first, second], **FAST) as remote,
        BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=5, **limit) as local,
    ):
        assert (remote.num_envs, remote.observation_shape, remote.action_shape) == (3, (3,), (1,))
        np.testing.assert_array_equal(remote.action_high, local.action_high)
        np.testing.assert_array_equal(remote.reset(), local.reset())
        ended = 0
        for action in actions:
            got, want = remote.step(action), local.step(action)
            for name, value in vars(want).items():
                np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
            ended += len(got.episode_returns)
        assert ended == 6  # every environment ended two episodes (automatic resets included)
        health = grpc.insecure_channel(first).unary_unary(f"/{protocol.HEALTH_SERVICE}/{protocol.HEALTH_METHOD}")
        assert health(b"", timeout=5) == protocol.HEALTH_SERVING


def test_servers_are_groups_stepped_on_their_own_like_local_processes() -> None:
    """Each server is a group (`send_step`, `receive_step`), like each process of a BatchEnv."""
    actions = random_actions(6, 3)
    with (
        serving("Pendulum-v1", 2, seed=5) as first,
        serving("Pendulum-v1", 1, seed=7) as second,
        RemoteBatchEnv([first, second], **FAST) as remote,
        BatchEnv("Pendulum-v1", 3, envs_per_process=2, seed=5) as local,
    ):
        assert remote.groups == local.groups == [range(0, 2), range(2, 3)]
        np.testing.assert_array_equal(remote.reset(), local.reset())
        for env in (remote, local):
            with pytest.raises(RuntimeError, match="group 0 is not stepping; send_step it first"):
                env.receive_step(0)
        got, want = [], []
        for env, results in ((remote, got), (local, want)):
            env.send_step(1, actions[0, 2:])
            for t in range(3):  # the first server goes three steps while the second is in flight
                env.send_step(0, actions[t, :2])
                results.append(env.receive_step(0))
            with pytest.raises(RuntimeError, match="group 1 is already stepping; receive_step it first"):
                env.send_step(1, actions[1, 2:])
            results.append(env.receive_step(1))
            results.append(env.step(actions[3]))
        for mine, theirs in zip(got, want, strict=True):
            for name, value in vars(theirs).items():
                np.testing.assert_array_equal(getattr(mine, name), value, err_msg=name)


def test_an_environment_error_is_one_line_to_the_client_and_its_traceback_in_the_server_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serving(RAISING, 2) as address:
        with RemoteBatchEnv([address], **FAST) as env:
            env.reset()
            env.step(np.zeros((2, 1)))
            env.step(np.zeros((2, 1)))
            with pytest.raises(EnvServerError) as failure:
                env.step(np.zeros((2, 1)))
            message = str(failure.value)
            assert "\n" not in message and "Traceback" not in message, message
            assert f"env server {address} (environments 0-1): EnvProcessError: " in message
            assert "environment 0 raised" in message
            assert "ZeroDivisionError: the test environment fails on purpose" in message
            assert "(traceback in the env server's log)" in message
            assert "Step failed" in caplog.text and "in step" in caplog.text  # the server's log has it whole
            with pytest.raises(RuntimeError, match="unusable"):
                env.step(np.zeros((2, 1)))
        with RemoteBatchEnv([address], **FAST) as env:  # the server builds a fresh batch for the next client
            env.reset()
            np.testing.assert_array_equal(env.step(np.zeros((2, 1))).observations, [[1.0], [1.0]])


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


def test_sigterm_closes_the_environments_and_a_gone_server_is_named() -> None:
    process = ServerProcess("--env", "Pendulum-v1", "--envs", 2, "--envs-per-process", 1, "--port", 0)
    try:
        workers = process.workers()
        assert len(workers) == 2
        with RemoteBatchEnv([process.address], timeout=5.0, max_failures=3) as env:
            env.reset()
            process.process.send_signal(signal.SIGTERM)
            assert process.process.wait(10) == 0
            assert not wait_until_gone(workers)
            started = time.monotonic()
            with pytest.raises(EnvServerUnavailable, match=f"env server {process.address} failed 3 times in a row"):
                env.step(np.zeros((2, 1)))
            assert time.monotonic() - started < 10
    finally:
        process.stop()


def test_command_line_mistakes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("env-server", "--env", "NoSuchEnvironment-v0", "--port", 0) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "agents-operator env-server: error: env_id 'NoSuchEnvironment-v0'" in error
    assert run("env-server", "--env", "Pendulum-v1", "--envs", 0) == 2
    assert "--envs must be at least 1" in capsys.readouterr().err
    with serving("Pendulum-v1", 1) as address:
        assert run("env-server", "--env", "Pendulum-v1", "--port", address.rsplit(":", 1)[1]) == 2
    assert "cannot listen on port" in capsys.readouterr().err


def test_serve_stops_on_sigterm_and_gives_the_signal_handlers_back(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(server.StartError):
        server.serve("CartPole-v1", 1, port=0)  # a discrete action space
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

    def terminate_once_serving() -> None:
        deadline = time.monotonic() + 30
        while "serving" not in capsys.readouterr().out and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # to the process, as a kubelet sends it: the main thread handles it

    with ThreadPoolExecutor(1) as pool:
        pool.submit(terminate_once_serving)
        assert server.serve("Pendulum-v1", 1, port=0) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# --- rollout mode ------------------------------------------------------------------------------------


def random_policy(config: TrainerConfig, obs_dim: int, act_dim: int, seed: int = 0) -> NumpyPolicy:
    rng = np.random.default_rng(seed)

    def layers(sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.normal(0, 0.5, (fan_in, fan_out)).astype(np.float32), rng.normal(0, 0.1, fan_out).astype(np.float32))
            for fan_in, fan_out in itertools.pairwise(sizes)
        ]

    policy = layers([obs_dim, *config.policy_layers, act_dim])
    value = layers([obs_dim, *config.value_layers, 1])
    return NumpyPolicy(policy, np.full(act_dim, -0.5, np.float32), value, config.activation)


ROLLOUT_CONFIG = TrainerConfig(
    env_id="Pendulum-v1",
    envs_per_worker=3,
    rollout_steps=30,
    minibatches=1,
    max_episode_steps=20,
    policy_layers=[16, 16],
    value_layers=[16, 16],
)


def sample(env: TrainingEnv, sampler_type: type, rollouts: int = 2) -> tuple[list, np.random.Generator]:
    """Rollouts of a random policy, with normaliser statistics as a trainer would have them mid-run."""
    env.observations.shared = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
    env.rewards.statistics.shared = Moments(50.0, np.array(-100.0), np.array(900.0))
    rng = np.random.default_rng(0)
    sampler = sampler_type(env, ROLLOUT_CONFIG, rng)
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    return [sampler.collect(policy) for _ in range(rollouts)], rng


def test_rollout_mode_builds_the_batch_the_local_sampler_builds() -> None:
    from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler

    limit = {"max_episode_steps": 20}
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=11, **limit) as batch_env:
        local = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        want, want_rng = sample(local, Sampler)
    with serving("Pendulum-v1", 3, seed=11, **limit) as address, RemoteBatchEnv([address], **FAST) as batch_env:
        remote = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        got, got_rng = sample(remote, RolloutSampler)
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(got, want, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
        assert (returns, lengths) == (want_returns, want_lengths)
    assert [len(returns) for _, returns, _ in got] == [3, 6]  # episodes of 20 steps end at steps 20, 40 and 60
    np.testing.assert_array_equal(remote.observations.pending.sum, local.observations.pending.sum)
    np.testing.assert_array_equal(remote.rewards.statistics.pending.sumsq, local.rewards.statistics.pending.sumsq)
    np.testing.assert_array_equal(remote.rewards.returns, local.rewards.returns)
    assert got_rng.bit_generator.state == want_rng.bit_generator.state


def test_where_the_policy_acts_changes_nothing_and_grouping_only_rounding() -> None:
    """The worker processes acting for their own environments (`Sampler`) or this process acting for each
    process in turn (`StepSampler`): the same rollouts, bit for bit. One process of 3 environments or two
    (2 + 1): the same rollouts but for how the policy's matrix products round on 3 rows or on 2 and 1."""
    from agents_operator.trainer.sampling.samplers import Sampler, StepSampler

    samples = {}
    for envs_per_process, sampler in ((3, Sampler), (2, Sampler), (2, StepSampler)):
        with BatchEnv("Pendulum-v1", 3, envs_per_process=envs_per_process, seed=11, max_episode_steps=20) as env:
            samples[envs_per_process, sampler] = sample(TrainingEnv(env, ROLLOUT_CONFIG), sampler)
    (grouped, grouped_rng), (here, here_rng) = samples[2, Sampler], samples[2, StepSampler]
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(grouped, here, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
        assert (returns, lengths) == (want_returns, want_lengths)
    assert grouped_rng.bit_generator.state == here_rng.bit_generator.state
    whole, whole_rng = samples[3, Sampler]
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(grouped, whole, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_allclose(getattr(batch, name), value, rtol=1e-4, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(returns, want_returns, rtol=1e-4)
        assert lengths == want_lengths == [20] * len(lengths)
    assert grouped_rng.bit_generator.state == whole_rng.bit_generator.state


def test_rollouts_of_several_servers_are_merged_in_environment_order() -> None:
    def part(num_envs: int, episodes: list[tuple[int, int, float]]) -> Rollout:
        steps = 4
        zeros = np.zeros((steps, num_envs), np.float32)
        ended = np.array(episodes, np.float64).reshape(-1, 3)
        return Rollout(
            observations=np.full((steps + 1, num_envs, 3), num_envs, np.float32),
            actions=np.zeros((steps, num_envs, 1), np.float32),
            log_probs=zeros,
            means=np.zeros((steps, num_envs, 1), np.float32),
            values=zeros,
            rewards=zeros,
            terminated=zeros.astype(bool),
            truncated=zeros.astype(bool),
            final_values=zeros,
            last_values=np.zeros(num_envs, np.float32),
            episode_steps=ended[:, 0].astype(np.int64),
            episode_envs=ended[:, 1].astype(np.int64),
            episode_returns=ended[:, 2],
            episode_lengths=np.full(len(ended), 7, np.int64),
            restarted=np.full(num_envs, num_envs == 1),
            simulation_seconds=np.full(num_envs, 0.5 * num_envs),
        )

    merged = Rollout.concatenate([part(2, [(1, 0, -1.0), (3, 1, -2.0)]), part(1, [(0, 0, -3.0), (3, 0, -4.0)])])
    assert merged.observations.shape == (5, 3, 3) and merged.observations[0, :, 0].tolist() == [2, 2, 1]
    assert merged.episode_returns.tolist() == [-3.0, -1.0, -2.0, -4.0]  # by step, then environment
    assert merged.episode_envs.tolist() == [2, 0, 1, 2] and merged.episode_steps.tolist() == [0, 1, 3, 3]
    assert merged.restarted.tolist() == [False, False, True]
    assert merged.simulation_seconds.tolist() == [1.0, 1.0, 0.5]  # per simulating process, in order
    message = part(2, []).to_message()
    assert message.pop("simulation_seconds").tolist() == [1.0, 1.0]
    older = Rollout.from_message(message)  # an env server that does not time its simulation
    assert older.simulation_seconds.shape == (0,) and older.restarted.tolist() == [False, False]


def test_rollout_mode_resends_a_rollout_to_a_restarted_server() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    noise = np.random.default_rng(0).standard_normal((5, 3, 1), dtype=np.float32)
    service = server.EnvService("Pendulum-v1", 2, seed=3, envs_per_process=2)
    grpc_server, port = server.start(service, 0)
    try:
        with serving("Pendulum-v1", 1, seed=5) as other, RemoteBatchEnv([f"localhost:{port}", other], **FAST) as env:
            training = TrainingEnv(env, ROLLOUT_CONFIG)
            training.reset()
            assert not env.collect(policy, training.observations, noise).restarted.any()
            grpc_server.stop(0).wait()
            service.close()
            service = server.EnvService("Pendulum-v1", 2, seed=3, envs_per_process=2)
            grpc_server, _ = server.start(service, port)
            rollout = env.collect(policy, training.observations, noise)
    finally:
        grpc_server.stop(0).wait()
        service.close()
    assert rollout.restarted.tolist() == [True, True, False] and rollout.rewards.shape == (5, 3)
    with BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3) as fresh:
        np.testing.assert_array_equal(rollout.observations[0, :2], fresh.reset())
    # Each server sampled with its own columns of the trainer's noise.
    log_std = policy.log_std
    np.testing.assert_allclose((rollout.actions - rollout.means) / np.exp(log_std), noise, atol=1e-5)
    expected = -0.5 * np.square(noise[..., 0]) - log_std[0] - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(rollout.log_probs, expected, atol=1e-5)


# --- training ----------------------------------------------------------------------------------------


def test_ppo_trains_on_remote_environments_in_both_modes() -> None:
    from agents_operator.trainer.learner import Learner
    from agents_operator.trainer.sampling.samplers import RolloutSampler, StepSampler

    config = TrainerConfig(
        env_id="Pendulum-v1", envs_per_worker=4, rollout_steps=256, minibatches=4, epochs=2, total_steps=3072
    )
    with (
        serving("Pendulum-v1", 2, seed=0) as first,
        serving("Pendulum-v1", 2, seed=2) as second,
        RemoteBatchEnv([first, second], **FAST) as batch_env,
    ):
        learner = Learner(config, 3, 1)
        try:
            state = learner.initialize()
            env = TrainingEnv(batch_env, config)
            rng = np.random.default_rng(0)
            returns = []
            per_step, whole = StepSampler(env, config, rng), RolloutSampler(env, config, rng)
            for sampler in (per_step, per_step, whole):
                batch, episode_returns, _ = sampler.collect(state.policy)
                losses = learner.update(batch, rng)
                state, _ = learner.finish_iteration(
                    batch, len(batch), env.observations.take_pending(), env.rewards.statistics.take_pending()
                )
                env.observations.shared = state.observation_moments
                env.rewards.statistics.shared = state.return_moments
                returns += episode_returns
                assert np.isfinite(losses["policy_loss"]) and np.isfinite(losses["value_loss"])
        finally:
            learner.close()
    assert (state.env_steps, state.iterations) == (3072, 3)
    assert len(returns) >= 4 and all(-2000 < r < 0 for r in returns)
