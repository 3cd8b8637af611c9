"""The K epochs of minibatch steps (ppo/epochs.py): the update in one session run (a `tf.while_loop` over the
batch) against the update as one session run per minibatch, built from the same pieces: same losses, same weights.

The reference feeds the minibatches from numpy, in the order `epochs.minibatch_indices` draws from the seed the
learner draws from the same generator, into `minibatch_step` on a local copy that starts from the learner's
initial weights; it is the update as the learner ran it before it moved into the graph.

Tolerance: both run the same float32 kernels on the same data in the same order, but TensorFlow's graph
optimiser may fuse the loop body's ops differently from the plain graph's, and the push adds the change
to the shared weights as `shared - (anchor - local)`, which rounds where the local copy does not (seen:
metrics equal to the bit, weights apart by at most 5e-10). Such rounding is a few float32 ulps that 12 Adam
steps of size 1e-3 carry on: agreement to 1e-5 relative (1e-6 absolute) separates it from any change of
the mathematics (a minibatch in another order, a step that reads stale weights, a missed step), each of
which moves weights by the order of the learning rate.
"""

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import learner as learner_module
from agents_operator.trainer import localcopy
from agents_operator.trainer.learner import Learner
from agents_operator.trainer.ppo import epochs

OBS, ACT, SIZE = 3, 2, 32
RTOL, ATOL = 1e-5, 1e-6


def _config(**settings) -> TrainerConfig:
    small = dict(envs_per_worker=4, rollout_steps=8, minibatches=4, epochs=3, policy_layers=[16], value_layers=[16])
    return TrainerConfig(**{**small, "learning_rate": 1e-3, **settings})


def _batch(learner: Learner, seed: int = 0) -> learner_module.Batch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(SIZE, OBS)).astype(np.float32)
    policy = learner.state().policy
    actions, log_probs, means = policy.act(obs, rng.standard_normal((SIZE, ACT), dtype=np.float32))
    values = policy.value_of(obs).astype(np.float32)
    advantages = rng.normal(size=SIZE).astype(np.float32)
    return learner_module.Batch(obs, actions, log_probs, means, policy.log_std, values, advantages, values + 1.0)


def _update_per_minibatch(config: TrainerConfig, weights: list[np.ndarray], batch, seed) -> tuple[dict, list]:
    """The metrics (means over the minibatches) and the final weights of one session run per minibatch."""
    with tf.Graph().as_default() as graph:
        feeds = learner_module.placeholders(OBS, ACT)
        local = localcopy.LocalCopy.create(config, OBS, ACT)
        optimizer, learning_rate = localcopy.local_optimizer(config, local)
        train_op, metrics = localcopy.minibatch_step(config, local, optimizer, feeds)
        indices = epochs.minibatch_indices(config, SIZE, tf.constant(seed, tf.int64))
        assigns = [v.assign(w) for v, w in zip(local.networks.variables(), weights, strict=True)]
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(assigns)
        totals: dict[str, float] = {}
        order = session.run(indices)
        for rows in order:
            feed = {feeds[name]: getattr(batch, name)[rows] for name in feeds if name != "log_std"}
            _, values = session.run([train_op, metrics], {**feed, feeds["log_std"]: batch.log_std})
            for name, value in values.items():
                totals[name] = totals.get(name, 0.0) + float(value)
        means = {name: total / len(order) for name, total in totals.items()}
        means["learning_rate"] = float(session.run(learning_rate))
        return means, session.run(local.networks.variables())


@pytest.mark.parametrize(
    "settings",
    [{}, {"objective": "kl_penalty", "value_clip": 0.2, "entropy_coef": 0.01, "max_grad_norm": None}],
    ids=["clip", "kl_penalty"],
)
def test_the_update_in_one_run_is_the_update_per_minibatch(settings):
    config = _config(**settings)
    learner = Learner(config, OBS, ACT)
    try:
        learner.initialize()
        initial = learner.session.run(learner._g.state)["weights"]
        batch = _batch(learner)
        seed = np.random.default_rng(7).integers(np.iinfo(np.int64).max, size=2)
        metrics = learner.update(batch, np.random.default_rng(7))
        weights = learner.session.run(learner._g.state)["weights"]
    finally:
        learner.close()
    expected, expected_weights = _update_per_minibatch(config, initial, batch, seed)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=RTOL, abs=ATOL), name
    for got, want, before in zip(weights, expected_weights, initial, strict=True):
        assert not np.allclose(want, before, rtol=RTOL, atol=ATOL)  # every weight moved
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_each_epoch_is_a_permutation_and_the_order_depends_on_the_seed_alone():
    config = _config(epochs=4, minibatches=4)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        seeds = tf.compat.v1.placeholder(tf.int64, [2])
        indices = epochs.minibatch_indices(config, SIZE, seeds)
        first, again, other = (session.run(indices, {seeds: s}) for s in ([1, 2], [1, 2], [1, 3]))
    assert first.shape == (4 * 4, 8)
    orders = first.reshape(4, SIZE)
    assert all(sorted(epoch) == list(range(SIZE)) for epoch in orders)
    assert len({tuple(epoch) for epoch in orders}) == 4  # a fresh order every epoch
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
