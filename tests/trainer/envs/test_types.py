"""What every batch of environments shares (envs/types.py): step results of groups merged in order, and the
checks a batch makes before it talks to its workers or servers."""

import numpy as np
import pytest

from agents_operator.trainer.envs.types import BatchChecks, StepResult


def result(first_env: int, num_envs: int, returns: list[float]) -> StepResult:
    envs = np.arange(first_env, first_env + num_envs)
    return StepResult(
        observations=np.stack([envs, envs], axis=1).astype(np.float32),
        rewards=envs.astype(np.float32),
        terminated=envs % 2 == 0,
        truncated=np.zeros(num_envs, bool),
        final_observations=np.zeros((num_envs, 2), np.float32),
        episode_returns=returns,
        episode_lengths=[7] * len(returns),
    )


def test_the_results_of_groups_are_merged_in_environment_order():
    merged = StepResult.concatenate([result(0, 2, [-1.0]), result(2, 1, []), result(3, 2, [-2.0, -3.0])])
    assert merged.observations[:, 0].tolist() == [0, 1, 2, 3, 4] and merged.observations.shape == (5, 2)
    assert merged.rewards.tolist() == [0, 1, 2, 3, 4] and merged.terminated.tolist() == [1, 0, 1, 0, 1]
    assert merged.episode_returns == [-1.0, -2.0, -3.0] and merged.episode_lengths == [7, 7, 7]


class Batch(BatchChecks):
    """The smallest batch: two rows of actions of shape (3,), and an exchange that may fail."""

    env_id = "Test-v0"
    action_shape = (3,)

    def __init__(self):
        self._failure, self._was_reset = None, False

    def exchange(self, fail: bool) -> str:
        with self._guard():
            if fail:
                raise TimeoutError("no answer")
            return "answered"


def test_actions_are_checked_after_a_reset_against_the_rows_shape():
    batch = Batch()
    with pytest.raises(RuntimeError, match=r"Test-v0 Batch: call reset\(\) before step\(\)"):
        batch._check_actions(np.zeros((2, 3)), rows=2)
    batch._was_reset = True
    batch._check_actions(np.zeros((2, 3)), rows=2)
    with pytest.raises(ValueError, match=r"actions must have shape \(2, 3\), got \(2, 4\)"):
        batch._check_actions(np.zeros((2, 4)), rows=2)


def test_a_failed_exchange_makes_the_batch_unusable():
    batch = Batch()
    batch._was_reset = True
    assert batch.exchange(fail=False) == "answered"
    with pytest.raises(TimeoutError):
        batch.exchange(fail=True)
    for call in (lambda: batch.exchange(fail=False), lambda: batch._check_actions(np.zeros((2, 3)), rows=2)):
        with pytest.raises(RuntimeError, match="Test-v0 Batch is unusable: an earlier call failed with TimeoutError"):
            call()
