"""What an iteration reports (trainer/outputs.py): the ps share, the sampling's simulation share over a run,
and the summaries, with an async chief's staleness only where the update measured one."""

from types import SimpleNamespace

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer import summaries
from agents_operator.trainer.outputs import Outputs, RunResult, ps_share

LOSSES = {
    "policy_loss": 0.1,
    "value_loss": 0.2,
    "entropy": 0.3,
    "kl": 0.01,
    "approx_kl": 0.02,
    "clipfrac": 0.1,
    "clip_range": 0.2,
    "entropy_coef": 0.0,
    "learning_rate": 3e-4,
    "grad_norm": 1.0,
    "discarded_updates": 0,
    "ps_seconds": 0.5,
    "finish_seconds": 0.5,
    "epochs_seconds": 3.0,
}


def test_the_ps_share_is_the_pull_push_and_finish_over_the_whole_update():
    assert ps_share(LOSSES) == pytest.approx(1.0 / 4.0)


def test_the_simulation_share_of_a_run_weighs_each_timed_phase_by_its_seconds():
    result = RunResult(0, 0, collect_seconds=[1.0, 3.0, 2.0], simulation_shares=[0.5, 0.9, None])
    assert result.simulation_share == pytest.approx((0.5 * 1.0 + 0.9 * 3.0) / 4.0)
    assert RunResult(0, 0, collect_seconds=[1.0], simulation_shares=[None]).simulation_share is None


@pytest.mark.parametrize("staleness", [None, 1.0])
def test_the_chief_logs_a_pushs_staleness_only_where_the_update_measured_one(tmp_path, staleness):
    outputs = Outputs(TrainerConfig(metrics_port=0), tmp_path, None, episodes=None)
    state = SimpleNamespace(
        policy=SimpleNamespace(log_std=np.zeros(2)), env_steps=64, kl_beta=0.0, global_step=1, iterations=1
    )
    losses = LOSSES if staleness is None else {**LOSSES, "staleness": staleness}
    try:
        outputs.iteration(state, losses, [1.0], [10], 64, sampling_seconds=1.0, seconds=2.0, simulation=None)
    finally:
        outputs.close()
    logged = summaries.read_scalars(tmp_path, "async/staleness")
    assert logged == ([] if staleness is None else [(64, 1.0)])
    assert summaries.read_scalars(tmp_path, "perf/ps_share") == [(64, 0.25)]
