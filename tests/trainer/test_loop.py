"""The training loop (trainer/loop.py): a short real run learns; with its environments on env servers
(AGENTS_ENV_SERVERS) it trains in both modes as colocated, refuses servers that do not serve its config, and
the chief evaluates and renders its video there."""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer import loop, playback
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.summaries import read_scalars
from tests.trainer.envserver.servers import serving
from tests.trainer.envserver_envs import RAISING

# --- with its environments on env servers ---------------------------------------------------------------

# The pendulum preset learns within 40k steps: from about -1250 to -300 (training), -130 (evaluation). Its 8
# environments run in two groups of 4, locally (two processes) as on two env servers. Observations are
# normalised (the preset does not): where each mode takes its statistics is part of what is tested.
LEARNING = presets.resolve(
    "pendulum",
    {
        "normalize_observations": True,
        "total_steps": 40_960,
        "eval_every": 10,
        "eval_episodes": 2,
        "video_episodes": 0,
        "metrics_port": 0,
        "envs_per_process": 4,
    },
)


@contextlib.contextmanager
def two_servers() -> Iterator[tuple[str, str]]:
    """Two env servers of 4 environments, seeded as the colocated batch's two processes."""
    with (
        serving("Pendulum-v1", 4, seed=LEARNING.seed) as first,
        serving("Pendulum-v1", 4, seed=LEARNING.seed + 4) as second,
    ):
        yield first, second


def train(tmp_path: Path, env_servers: EnvServers | None = None) -> loop.RunResult:
    with open(tmp_path / "progress.txt", "w") as stream:
        return loop.train(LEARNING, tmp_path / "run", stream, env_servers=env_servers)


@pytest.fixture(scope="module")
def colocated(tmp_path_factory: pytest.TempPathFactory) -> loop.RunResult:
    return train(tmp_path_factory.mktemp("colocated"))


def assert_learned(result: loop.RunResult, gain: float = 500, evaluation: float = -500) -> None:
    """From random (below -1000) to swinging up: the training return up by `gain`, the evaluation above
    `evaluation`."""
    returns = [value for _, value in result.train_returns]
    first, last = np.mean(returns[:3]), np.mean(returns[-3:])
    assert first < -1000 and last > first + gain, returns
    assert [steps for steps, _ in result.evaluations] == [20_480, 40_960]
    assert result.evaluations[-1][1] > evaluation, result.evaluations
    assert len(result.update_seconds) == len(result.collect_seconds) == result.iterations
    assert 0 < result.evaluation_seconds < result.wall_seconds - sum(result.update_seconds)
    first, second = result.evaluated_after  # training seconds before each evaluation, evaluations excluded
    assert 0 < first < second <= result.wall_seconds - result.evaluation_seconds


def test_step_mode_trains_exactly_as_colocated(tmp_path: Path, colocated: loop.RunResult) -> None:
    """Servers seeded and grouped as the colocated batch: the same batches, so the same run, evaluations
    included."""
    with two_servers() as addresses:
        result = train(tmp_path, EnvServers(addresses, "step"))
    assert_learned(colocated)
    assert result.train_returns == colocated.train_returns
    assert result.evaluations == colocated.evaluations
    assert all(0 < share <= 1 for share in colocated.simulation_shares)  # timed by the worker processes
    assert set(result.simulation_shares) == {None}  # the servers step, the trainer acts: nobody times a rollout
    assert result.simulation_share is None and 0 < colocated.simulation_share <= 1


def test_rollout_mode_learns_as_colocated(tmp_path: Path, colocated: loop.RunResult) -> None:
    """Rollout mode normalises a rollout's first observations with that rollout's statistics (see
    collector): the same first rollout, then a run of its own that learns as well."""
    with two_servers() as addresses:
        result = train(tmp_path, EnvServers(addresses, "rollout"))
    assert_learned(result)
    assert result.train_returns[0] == colocated.train_returns[0]
    assert result.train_returns != colocated.train_returns


def test_servers_that_do_not_serve_the_config_are_refused(tmp_path: Path) -> None:
    with serving("Pendulum-v1", 2) as address, pytest.raises(ValueError) as failure:
        loop.train(LEARNING, tmp_path / "run", env_servers=EnvServers((address,)))
    assert str(failure.value) == f"env servers {address} serve 2 environments in all, envs_per_worker is 8"
    with serving(RAISING, 8) as address, pytest.raises(ValueError) as failure:
        loop.train(LEARNING, tmp_path / "run", env_servers=EnvServers((address,)))
    assert str(failure.value) == f"env server {address} serves {RAISING}, not Pendulum-v1"


def test_the_chief_evaluates_and_renders_its_video_on_the_server(remote_run: tuple[Path, str]) -> None:
    logdir, _ = remote_run
    evaluations = read_scalars(logdir, "eval/mean_return")
    assert [step for step, _ in evaluations] == [256, 512]
    assert all(-1000 < value < 0 for _, value in evaluations)
    assert read_scalars(logdir, "eval/mean_length") == [(256, 50.0), (512, 50.0)]
    assert (logdir / "videos" / "final.gif").read_bytes()[:6] == b"GIF89a"


# --- overlapped sampling (config overlap) -------------------------------------------------------------------

OVERLAPPED = LEARNING.model_copy(update={"overlap": True})


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory: pytest.TempPathFactory) -> loop.RunResult:
    directory = tmp_path_factory.mktemp("overlapped")
    with open(directory / "progress.txt", "w") as stream:
        return loop.train(OVERLAPPED, directory / "run", stream)


def test_an_overlapped_run_learns_and_its_evaluations_wait_for_the_rollout_in_flight(
    overlapped: loop.RunResult, colocated: loop.RunResult
) -> None:
    assert_learned(overlapped, gain=400)  # its rollouts are acted by the policy one update behind the evaluated one
    assert overlapped.train_returns[0] == colocated.train_returns[0]  # the first rollout: nothing to overlap
    assert overlapped.train_returns != colocated.train_returns
    assert overlapped.env_steps == colocated.env_steps == LEARNING.total_steps
    assert set(overlapped.simulation_shares) == {None}  # the learner's wait is not a rollout's wall time


@pytest.mark.parametrize("mode", ["step", "rollout"])
def test_overlapped_on_env_servers_trains_exactly_as_overlapped_colocated(
    tmp_path: Path, overlapped: loop.RunResult, mode: str
) -> None:
    """Overlapped, every placement normalises a rollout's observations, its first ones included, with the
    statistics of its start: servers seeded and grouped as the colocated batch give the same run in both modes."""
    with two_servers() as addresses, open(tmp_path / "progress.txt", "w") as stream:
        result = loop.train(OVERLAPPED, tmp_path / "run", stream, env_servers=EnvServers(addresses, mode))
    assert result.train_returns == overlapped.train_returns
    assert result.evaluations == overlapped.evaluations


# --- the serial loop, bit for bit ------------------------------------------------------------------------------

SERIAL = TrainerConfig(
    env_id="Pendulum-v1",
    envs_per_worker=4,
    envs_per_process=2,
    rollout_steps=32,
    minibatches=2,
    epochs=2,
    max_episode_steps=50,
    policy_layers=[16],
    value_layers=[16],
    total_steps=512,
    eval_every=2,
    eval_episodes=2,
    video_episodes=0,
    metrics_port=0,
    normalize_observations=True,
    seed=7,
    export=False,
)


def test_without_overlap_the_loop_trains_bit_for_bit_as_before_overlap_existed(tmp_path: Path) -> None:
    """The numbers of a short serial run, recorded with the loop as it was before `overlap` was added
    (commit a5bcc5b): the returns and evaluations, and a digest of four scalars at every update."""
    result = loop.train(SERIAL, tmp_path / "run", io.StringIO())
    assert result.train_returns == [(256, -330.020443875453), (512, -292.3363198221497)]
    assert result.evaluations == [(256, -314.2373571698512), (512, -314.0745752437111)]
    tags = ("loss/policy", "loss/value", "policy/kl", "policy/std")
    scalars = repr([read_scalars(tmp_path / "run", tag) for tag in tags])
    assert hashlib.sha256(scalars.encode()).hexdigest() == SERIAL_SCALARS, scalars


SERIAL_SCALARS = "6c9a84da3e9e44284fdb7d887d0aead6da9b0691fbce50c015e9013dceff1664"


# --- a short real run learns: far better than a random policy on a fast PyBullet task ------------------------


def _random_policy_return(env_id, episodes=10):
    env = make_env(env_id)
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = rng.uniform(env.action_space.low, env.action_space.high)
            _, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def test_a_run_with_state_dependent_exploration_learns_and_resumes(tmp_path: Path) -> None:
    """gSDE's std (`exploration: state_dependent`): Pendulum learns as with the state-independent one, its
    log-std one per unit of the last hidden layer and action, kept in the checkpoint a resumed run goes on from."""
    config = LEARNING.model_copy(update={"exploration": "state_dependent", "init_log_std": -1.0})
    result = loop.train(config, tmp_path / "run")
    assert_learned(result, gain=400)
    with playback.of_run(config, tmp_path / "run", None) as player:
        assert player.policy.log_std.shape == (config.policy_layers[-1], 1)
    longer = config.model_copy(update={"total_steps": config.total_steps + config.batch_size})
    resumed = loop.train(longer, tmp_path / "run")  # from the run's latest checkpoint
    assert (len(resumed.train_returns), resumed.env_steps) == (1, longer.total_steps)  # one more iteration


def test_held_exploration_weights_learn_and_act_alike_in_the_trainer_and_in_the_workers(tmp_path: Path) -> None:
    """gSDE's weights held for 4 steps (`exploration_hold`): Pendulum learns, and env servers in step mode (the
    trainer acts) train exactly as the worker processes do (they act in colocated runs)."""
    update = {"exploration": "state_dependent", "init_log_std": -1.0, "exploration_hold": 4}
    config = LEARNING.model_copy(update=update)
    with open(tmp_path / "colocated.txt", "w") as stream:
        colocated = loop.train(config, tmp_path / "colocated", stream)
    # Held weights explore in slower, correlated swings: at 40k steps this run evaluated at -538, per-step gSDE's
    # above -500 (a random policy: about -1,250).
    assert_learned(colocated, gain=400, evaluation=-650)
    with two_servers() as addresses, open(tmp_path / "step.txt", "w") as stream:
        stepped = loop.train(config, tmp_path / "step", stream, env_servers=EnvServers(addresses, "step"))
    assert stepped.train_returns == colocated.train_returns
    assert stepped.evaluations == colocated.evaluations


def test_inverted_pendulum_learns_in_20k_steps(tmp_path):
    # A constant step size: annealed to zero over only 20k steps, the last iterations would barely move.
    settings = {"total_steps": 20_480, "lr_schedule": "constant", "eval_every": 1000, "eval_episodes": 3}
    settings["metrics_port"] = 0
    config = presets.resolve("inverted_pendulum", settings)
    result = loop.train(config, tmp_path / "run")
    random_return = _random_policy_return(config.env_id)
    (steps, trained_return), *_ = result.evaluations
    assert steps == 20_480
    assert random_return < 100
    assert trained_return > 500, (trained_return, random_return)


def test_the_chief_evaluates_and_checkpoints_at_every_multiple_the_shared_counter_passes():
    """Async workers move the shared iteration counter too: in a 1 ps + 2 worker hopper job the chief's own
    iterations saw 1, 3, 5, ... and never landed on a multiple of eval_every, so it evaluated only at the end."""
    chief_sees = list(range(1, 246, 2))  # the counter after each of the chief's iterations, another worker between
    due = [after for before, after in zip([0, *chief_sees], chief_sees, strict=False) if loop._due(before, after, 20)]
    assert due == [21, 41, 61, 81, 101, 121, 141, 161, 181, 201, 221, 241]
    assert [n for n in range(1, 61) if loop._due(n - 1, n, 20)] == [20, 40, 60]  # one worker: every 20th, as before
    assert not any(loop._due(n - 1, n, 0) for n in range(1, 50))  # eval_every 0: never


class _JoiningLearner:
    """A worker's learner whose ps is lost `losses` times while it joins."""

    def __init__(self, losses: int):
        self.losses, self.calls = losses, []

    def _call(self, name: str, initialize) -> None:
        self.calls.append((name, initialize))
        if self.losses:
            self.losses -= 1
            raise tf.errors.UnavailableError(None, None, "failed to connect to all addresses\nmore")

    def join(self, initialize) -> None:
        self._call("join", initialize)

    def reconnect(self, initialize) -> None:
        self._call("reconnect", initialize)


def test_a_ps_lost_while_a_worker_joins_is_waited_for_and_joined_again():
    """A worker waiting for the chief to initialise the shared state polls the ps tasks: a ps that dies then is
    a reconnect, as in training, not an error out of the process."""
    notes = []
    learner = _JoiningLearner(losses=2)
    outputs = SimpleNamespace(progress=SimpleNamespace(note=notes.append))
    run = loop._Run(LEARNING, Path("."), object(), None, False, learner, None, None, outputs)
    run._join()
    assert [name for name, _ in learner.calls] == ["join", "reconnect", "reconnect"]
    assert all(initialize == run.restore for _, initialize in learner.calls)  # the chief's restore, if it is one
    cause = "UnavailableError: failed to connect to all addresses"
    assert notes == [f"lost a parameter server while joining ({cause}); reconnecting"] * 2
    learner = _JoiningLearner(losses=0)
    loop._Run(LEARNING, Path("."), object(), None, False, learner, None, None, outputs)._join()
    assert [name for name, _ in learner.calls] == ["join"]
