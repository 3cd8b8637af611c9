"""Checkpoints (trainer/checkpoints.py): save/restore of the shared state, fallback past a corrupt checkpoint,
one line naming why none can be restored, checkpoints of an earlier version."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.trainer import checkpoints
from agents_operator.trainer.checkpoints import CheckpointError
from agents_operator.trainer.learner import Learner
from agents_operator.trainer.ppo.normalize import Moments
from tests.trainer.learners import ACT, OBS, batch_for, small_config


def _restore_in_a_new_learner(logdir):
    """The state of `logdir`'s only checkpoint, written after one iteration of 32 steps, restored."""
    learner = Learner(small_config(), OBS, ACT)
    try:
        restored, path = checkpoints.restore_latest(learner, logdir)
    finally:
        learner.close()
    assert path.name == "ckpt-00000001"
    assert (restored.global_step, restored.env_steps, restored.iterations) == (1, 32, 1)
    return restored


def test_checkpoint_round_trip_restores_weights_counters_and_statistics(learner, tmp_path):
    state = learner.initialize()
    batch = batch_for(state)
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
    batch = batch_for(state)
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
    wider = Learner(small_config(policy_layers=[32]), OBS, ACT)
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
