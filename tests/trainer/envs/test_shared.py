"""The memory a BatchEnv shares with its workers (envs/shared.py): both sides lay it out alike, every array
aligned; a group's rows are views, a step's result a copy."""

import mmap

import numpy as np
import pytest

from agents_operator.trainer.envs.shared import Layout, aligned

LAYOUT = Layout(num_envs=5, observation_shape=(3,), action_shape=(2,), action_dtype="float32")


@pytest.mark.parametrize(("nbytes", "expected"), [(0, 0), (1, 64), (64, 64), (65, 128), (200, 256)])
def test_sizes_are_rounded_up_to_cache_lines(nbytes, expected):
    assert aligned(nbytes) == expected


def test_both_sides_see_the_same_arrays_in_one_buffer():
    memory = mmap.mmap(-1, LAYOUT.nbytes)
    parent, worker = LAYOUT.arrays(memory), Layout(**vars(LAYOUT)).arrays(memory)
    worker.observations[:] = np.arange(15).reshape(5, 3)
    worker.rewards[:] = [1, 2, 3, 4, 5]
    worker.terminated[3] = True
    parent.actions[:] = 0.5
    np.testing.assert_array_equal(parent.observations, np.arange(15).reshape(5, 3))
    assert parent.rewards.tolist() == [1, 2, 3, 4, 5] and parent.terminated.tolist() == [0, 0, 0, 1, 0]
    assert (worker.actions == 0.5).all() and worker.actions.dtype == np.float32
    addresses = [array.__array_interface__["data"][0] for array in vars(parent).values()]
    assert all((address - addresses[0]) % 64 == 0 for address in addresses)  # each array on its own lines
    sizes = [array.nbytes for array in vars(parent).values()]
    assert LAYOUT.nbytes == sum(aligned(size) for size in sizes)


def test_a_groups_rows_are_views_and_its_result_a_copy():
    arrays = LAYOUT.arrays(mmap.mmap(-1, LAYOUT.nbytes))
    group = arrays.rows(2, 4)
    group.rewards[:] = 7.0
    assert arrays.rewards.tolist() == [0, 0, 7, 7, 0]
    result = group.result([-1.5], [10])
    group.rewards[:] = 0.0
    assert result.rewards.tolist() == [7, 7] and result.observations.shape == (2, 3)
    assert (result.episode_returns, result.episode_lengths) == ([-1.5], [10])
