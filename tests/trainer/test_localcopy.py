"""A worker's copy of the networks (trainer/localcopy.py): an anchored update is clipped around the weights the
worker pulled, not around the policy that acted (the update's steps themselves: tests/trainer/ppo/test_epochs.py)."""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.trainer.learner import build_graph
from agents_operator.trainer.ppo.policy import NumpyPolicy
from tests.trainer.learners import ACT, OBS, batch_for, small_config


@pytest.mark.parametrize("anchored", [False, True])
def test_an_anchored_update_is_clipped_around_the_weights_it_pulled_not_the_policy_that_acted(anchored):
    """A batch acted by the policy before another worker's push: anchored (an async worker in a cluster), the
    update starts at ratio 1 on every sample; clipped around the acting policy instead, it starts with many
    samples outside the clip range (which drag the weights back towards that policy)."""
    config = small_config(learning_rate=1e-12, epochs=1, minibatches=1, clip_range=0.1)
    rng = np.random.default_rng(0)
    metrics = _update_after(  # another worker's push
        config, anchored, lambda g: [v.assign_add(0.3 * rng.normal(size=v.shape)) for v in g.networks.variables()]
    )
    if anchored:
        assert metrics["clipfrac"] == 0.0
        assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    else:
        assert metrics["clipfrac"] > 0.2


@pytest.mark.parametrize(("anchored", "floor"), [(False, 0.1), (True, 0.3)])
def test_an_async_worker_in_a_cluster_holds_the_clip_at_async_clip_range_floor(anchored, floor):
    """Past the step where 0.4 x (1 - progress) is below both floors, the update's clip is the floor of its
    layout: `async_clip_range_floor` for an anchored copy (an async worker in a cluster), else
    `clip_range_floor`."""
    config = small_config(
        clip_range=0.4, clip_schedule="linear", clip_range_floor=0.1, async_clip_range_floor=0.3, total_steps=64
    )
    metrics = _update_after(config, anchored, lambda g: g.state["env_steps"].assign(60))  # 0.4 x (1 - 60/64)
    assert metrics["clip_range"] == pytest.approx(floor)


def _update_after(config, anchored, change):
    """The update's metrics on a batch acted by the initial weights, after the ops `change(graph)` returns ran
    on the shared variables and the worker pulled them."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        g = build_graph(config, OBS, ACT, anchored=anchored)
        session.run(tf.compat.v1.global_variables_initializer())
        acting = NumpyPolicy.from_values(session.run(g.networks.variables()), len(g.networks.policy), config.activation)
        batch = batch_for(SimpleNamespace(policy=acting))
        session.run(change(g))
        session.run(g.pull)
        feed = {tensor: getattr(batch, name) for name, tensor in g.feeds.items()}
        return session.run(g.update, {**feed, g.update_seed: [0, 0]})
