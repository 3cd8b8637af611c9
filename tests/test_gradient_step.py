"""benchmarks/bench_gradient_step.py: every variant runs on the preset it is asked for."""

from __future__ import annotations

import pytest

from benchmarks import bench_gradient_step


@pytest.mark.parametrize("preset", ["hopper", "pendulum"])
def test_every_variant_times_a_step_of_the_preset(preset):
    """hopper explores with gSDE, whose per-sample std the comparison variants do not take: its step is timed
    with the state-independent std on its own networks and minibatches (the default preset, cheetah, once
    failed on its first feed)."""
    shrunk = {"envs_per_worker": 2, "rollout_steps": 16, "epochs": 1, "minibatches": 2}
    config = bench_gradient_step.timed_config(preset, {**shrunk, "policy_layers": [8], "value_layers": [8]})
    assert (config.exploration, config.overlap) == ("state_independent", False)
    result = bench_gradient_step.measure(config, rounds=1)
    assert result["steps_per_update"] == 2 and result["minibatch_size"] == 16
    assert set(result["ms_per_step"]) >= {"learner", "per_minibatch", "tf2_function", "tf2_epoch_function"}
    assert all(ms > 0 for ms in result["ms_per_step"].values())
