"""The sampling loop's result (envs/rollout.py): `Rollout`s of several servers merged in environment order, and
as a message."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envs.rollout import Rollout

pytestmark = pytest.mark.timeout(60)


def test_rollouts_of_several_servers_are_merged_in_environment_order() -> None:
    def part(num_envs: int, episodes: list[tuple[int, int, float]]) -> Rollout:
        steps = 4
        zeros = np.zeros((steps, num_envs), np.float32)
        ended = np.array(episodes, np.float64).reshape(-1, 3)
        return Rollout(
            observations=np.full((steps + 1, num_envs, 3), num_envs, np.float32),
            acting=np.full((steps + 1, num_envs, 3), -num_envs, np.float32),
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
    assert merged.acting.shape == (5, 3, 3) and merged.acting[4, :, 2].tolist() == [-2, -2, -1]
    assert merged.episode_returns.tolist() == [-3.0, -1.0, -2.0, -4.0]  # by step, then environment
    assert merged.episode_envs.tolist() == [2, 0, 1, 2] and merged.episode_steps.tolist() == [0, 1, 3, 3]
    assert merged.restarted.tolist() == [False, False, True]
    assert merged.simulation_seconds.tolist() == [1.0, 1.0, 0.5]  # per simulating process, in order
    message = part(2, []).to_message()
    assert message.pop("simulation_seconds").tolist() == [1.0, 1.0]
    older = Rollout.from_message(message)  # an env server that does not time its simulation
    assert older.simulation_seconds.shape == (0,) and older.restarted.tolist() == [False, False]


def test_a_reply_without_a_field_names_it() -> None:
    steps, zeros = 2, np.zeros((2, 1), np.float32)
    message = {"observations": np.zeros((steps + 1, 1, 3), np.float32), "rewards": zeros}
    lacks = r"a rollout reply lacks acting, actions, .*: an env server of another version"
    with pytest.raises(ValueError, match=lacks):
        Rollout.from_message(message)
