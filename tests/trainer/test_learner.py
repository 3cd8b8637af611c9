"""The learner graph: numpy actor == TF graph, counters, KL penalty, save/restore, checkpoint fallback."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints
from agents_operator.trainer.checkpoints import CheckpointError
from agents_operator.trainer.learner import Batch, Learner
from agents_operator.trainer.ppo.normalize import Moments

OBS, ACT = 3, 2


def _config(**settings):
    small = dict(envs_per_worker=4, rollout_steps=8, minibatches=4, epochs=3, policy_layers=[16], value_layers=[16])
    return TrainerConfig(**{**small, **settings})


def _batch(learner_state, size=32, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(size, OBS)).astype(np.float32)
    policy = learner_state.policy
    actions, log_probs, means = policy.act(obs, rng.standard_normal((size, ACT), dtype=np.float32))
    values = policy.value_of(obs).astype(np.float32)
    advantages = rng.normal(size=size).astype(np.float32)
    return Batch(obs, actions, log_probs, means, policy.log_std, values, advantages, values + advantages)


@pytest.fixture
def learner():
    learner = Learner(_config(), OBS, ACT)
    yield learner
    learner.close()


def test_numpy_actor_matches_the_graph_and_init_is_orthogonal(learner):
    state = learner.initialize()
    batch = _batch(state)
    # KL between the numpy actor's Gaussians and the graph's on the same weights: zero if they agree.
    _, finish = learner.finish_iteration(batch, 0, Moments.zeros((OBS,)), Moments.zeros(()))
    assert finish["kl"] == pytest.approx(0.0, abs=1e-6)
    kernel = state.policy.policy[0][0]  # (3, 16): orthonormal rows times sqrt(2)
    np.testing.assert_allclose(kernel @ kernel.T, 2.0 * np.eye(OBS), atol=1e-5)
    assert np.all(state.policy.log_std == 0.0)


def test_update_and_finish_count_steps_and_push_statistics(learner):
    state = learner.initialize()
    batch = _batch(state)
    metrics = learner.update(batch, np.random.default_rng(0))
    assert set(metrics) >= {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "learning_rate"}
    observations = Moments.of(np.ones((5, OBS)))
    state, finish = learner.finish_iteration(batch, 32, observations, Moments.of(np.arange(4.0)))
    # one push of the iteration's change to the shared weights: one global step
    assert (state.global_step, state.env_steps, state.iterations) == (1, 32, 1)
    assert state.observation_moments.count == 5
    assert state.return_moments.sum == 6.0
    assert finish["kl"] > 0
    # the linear schedule anneals by the env steps counted so far: 32 of 1M
    second = learner.update(batch, np.random.default_rng(1))
    assert second["learning_rate"] == pytest.approx(3e-4 * (1 - 32 / 1_000_000))


def test_kl_penalty_coefficient_adapts():
    learner = Learner(_config(objective="kl_penalty", learning_rate=0.1, kl_init_penalty=1.0), OBS, ACT)
    try:
        state = learner.initialize()
        batch = _batch(state)
        learner.update(batch, np.random.default_rng(0))
        state, finish = learner.finish_iteration(batch, 32, Moments.zeros((OBS,)), Moments.zeros(()))
        assert finish["kl"] > 1.3 * 0.01
        assert state.kl_beta == pytest.approx(1.5)
    finally:
        learner.close()


def _restore_in_a_new_learner(logdir):
    """The state of `logdir`'s only checkpoint, written after one iteration of 32 steps, restored."""
    learner = Learner(_config(), OBS, ACT)
    try:
        restored, path = checkpoints.restore_latest(learner, logdir)
    finally:
        learner.close()
    assert path.name == "ckpt-00000001"
    assert (restored.global_step, restored.env_steps, restored.iterations) == (1, 32, 1)
    return restored


def test_checkpoint_round_trip_restores_weights_counters_and_statistics(learner, tmp_path):
    state = learner.initialize()
    batch = _batch(state)
    learner.update(batch, np.random.default_rng(0))
    saved, _ = learner.finish_iteration(batch, 32, Moments.of(np.full((7, OBS), 2.0)), Moments.of(np.ones(3)))
    checkpoints.save(learner, tmp_path, saved.iterations)
    restored = _restore_in_a_new_learner(tmp_path)
    np.testing.assert_array_equal(restored.observation_moments.sum, saved.observation_moments.sum)
    assert restored.return_moments.count == 3
    np.testing.assert_array_equal(restored.policy.policy[0][0], saved.policy.policy[0][0])
    np.testing.assert_array_equal(restored.policy.log_std, saved.policy.log_std)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(learner, tmp_path, caplog):
    state = learner.initialize()
    batch = _batch(state)
    for _ in range(4):
        state, _ = learner.finish_iteration(batch, 10, Moments.zeros((OBS,)), Moments.zeros(()))
        checkpoints.save(learner, tmp_path, state.iterations)
    kept = checkpoints.list_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["ckpt-00000002", "ckpt-00000003", "ckpt-00000004"]
    data = next(kept[-1].glob("model.data-*"))
    data.write_bytes(data.read_bytes()[: len(data.read_bytes()) // 2])  # a torn write
    (tmp_path / "checkpoints" / ".tmp-crashed").mkdir()  # an interrupted save is never a candidate
    restored, path = checkpoints.restore_latest(learner, tmp_path)
    assert path == kept[-2]
    assert restored.env_steps == 30
    assert "ckpt-00000004 cannot be restored" in caplog.text
    for checkpoint in kept[:-1]:
        (checkpoint / "model.index").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="none of the 3 checkpoints"):
        checkpoints.restore_latest(learner, tmp_path)


def _damage_data(checkpoint):
    data = next(checkpoint.glob("model.data-*"))
    return data, data.read_bytes()


@pytest.mark.parametrize(
    "damage, cause",
    [
        (lambda data, raw, index: data.write_bytes(raw[: len(raw) // 2]), "Read less bytes than requested"),
        (lambda data, raw, index: data.write_bytes(b"x" * len(raw)), "Checksum does not match"),
        (lambda data, raw, index: data.unlink(), "model.data-00000-of-00001; No such file or directory"),
        (lambda data, raw, index: index.write_bytes(b"garbage"), "too short to be an sstable"),
    ],
    ids=["torn data", "garbage data", "data missing", "garbage index"],
)
def test_a_checkpoint_that_cannot_be_restored_is_reported_with_its_cause(learner, tmp_path, damage, cause):
    learner.initialize()
    path = checkpoints.save(learner, tmp_path, 1)
    data, raw = _damage_data(path)
    damage(data, raw, path / "model.index")
    with pytest.raises(CheckpointError) as failure:
        checkpoints.restore_latest(learner, tmp_path)
    message = str(failure.value)
    assert "ckpt-00000001: " in message and cause in message
    assert "Graph execution error" not in message and "\n" not in message


def test_a_checkpoint_of_other_network_settings_names_the_variable_and_both_shapes(learner, tmp_path):
    learner.initialize()
    checkpoints.save(learner, tmp_path, 1)
    wider = Learner(_config(policy_layers=[32]), OBS, ACT)
    try:
        with pytest.raises(
            CheckpointError,
            match=r"variable policy/dense0/kernel has shape \[3, 16\] in the "
            r"checkpoint but \[3, 32\] in this graph",
        ):
            checkpoints.restore_latest(wider, tmp_path)
        assert wider.initialize().global_step == 0  # nothing of the wrong shape was assigned
    finally:
        wider.close()


def test_no_checkpoint_means_a_fresh_start(learner, tmp_path):
    assert checkpoints.restore_latest(learner, tmp_path) is None


def test_a_checkpoint_of_an_earlier_version_restores():
    """Checkpoints hold the shared state only, under the same names whatever the update's graph looks like:
    `data/run-63ecbcd` was written by that commit (one update per session run per minibatch) after one
    iteration of this file's `_config` with a batch as `_batch` makes it."""
    run = Path(__file__).parent / "data" / "run-63ecbcd"
    saved = tf.compat.v1.train.NewCheckpointReader(str(run / "checkpoints" / "ckpt-00000001" / "model"))
    restored = _restore_in_a_new_learner(run)
    assert restored.observation_moments.count == 7
    np.testing.assert_array_equal(restored.policy.log_std, saved.get_tensor("policy/log_std"))
    np.testing.assert_array_equal(restored.policy.value[0][0], saved.get_tensor("value/dense0/kernel"))
