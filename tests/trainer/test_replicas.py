"""The state every worker shares and a worker's push (trainer/replicas.py): the counters and normaliser sums
start where they must, and one push adds the worker's change to the shared weights, counts one update and
reads its staleness, the updates other workers pushed since this worker's pull (the sync mode's updates:
tests/trainer/test_syncupdates.py)."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.replicas import Shared, changes, push

CONFIG = TrainerConfig(policy_layers=[4], value_layers=[4], kl_init_penalty=0.5, init_log_std=-1.0)
OBS, ACT = 3, 2


@pytest.fixture
def session():
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        yield session


def test_the_shared_state_starts_fresh(session):
    shared = Shared.create(CONFIG, OBS, ACT)
    session.run(tf.compat.v1.global_variables_initializer())
    state = session.run(shared.state())
    assert {k: state[k] for k in ("global_step", "env_steps", "iterations")} == dict.fromkeys(
        ("global_step", "env_steps", "iterations"), 0
    )
    assert state["kl_beta"] == pytest.approx(0.5)
    assert state["observation_sum"].shape == state["observation_sumsq"].shape == (OBS,)
    assert state["observation_count"] == state["return_count"] == state["return_sum"] == 0.0
    assert len(state["weights"]) == len(shared.networks.variables())
    np.testing.assert_array_equal(state["weights"][4], [-1.0, -1.0])  # the policy's log std, after 2 layers


def _worker(shared: Shared, name: str):
    """A worker's anchor, weights and pulled step, as variables of their own, its push and whether the change
    it pushes is finite."""
    variables = shared.networks.variables()
    with tf.compat.v1.variable_scope(name):
        anchor, weights = (
            [
                tf.compat.v1.get_variable(f"{kind}{i}", v.shape, initializer=tf.zeros_initializer())
                for i, v in enumerate(variables)
            ]
            for kind in ("anchor", "weights")
        )
        pulled_step = tf.compat.v1.get_variable("pulled_step", [], tf.int64, initializer=tf.zeros_initializer())
    change = changes(anchor, weights, contextlib.nullcontext)
    return anchor, weights, pulled_step, push(shared, change.deltas, pulled_step), change.finite


def _set_change(session, anchor, weights, rng) -> list[np.ndarray]:
    """Give the worker a random start and a random change from it; the change."""
    starts = [rng.normal(size=a.shape).astype(np.float32) for a in anchor]
    deltas = [rng.normal(size=a.shape).astype(np.float32) for a in anchor]
    session.run([a.assign(s) for a, s in zip(anchor, starts, strict=True)])
    session.run([w.assign(s + c) for w, s, c in zip(weights, starts, deltas, strict=True)])
    return deltas


def test_a_push_adds_the_workers_change_to_the_shared_weights_and_counts_one_update(session):
    shared = Shared.create(CONFIG, OBS, ACT)
    anchor, weights, _, pushed, finite = _worker(shared, "worker")
    session.run(tf.compat.v1.global_variables_initializer())
    before = session.run(shared.networks.variables())
    deltas = _set_change(session, anchor, weights, np.random.default_rng(0))
    _, staleness, was_finite = session.run([pushed.op, pushed.staleness, finite])
    assert staleness == 0 and was_finite
    for after, was, change in zip(session.run(shared.networks.variables()), before, deltas, strict=True):
        np.testing.assert_allclose(after, was + change, rtol=1e-5, atol=1e-6)
    assert session.run(shared.counters["global_step"]) == 1


@pytest.mark.parametrize("others", [1, 3])
def test_a_push_after_other_workers_pushes_reads_their_number_as_its_staleness(session, others):
    shared = Shared.create(CONFIG, OBS, ACT)
    anchor, weights, pulled_step, pushed, _ = _worker(shared, "late")
    other_anchor, other_weights, _, other, _ = _worker(shared, "other")
    session.run(tf.compat.v1.global_variables_initializer())
    rng = np.random.default_rng(1)
    session.run(pulled_step.assign(0))  # pulled before any push
    for _ in range(others):
        _set_change(session, other_anchor, other_weights, rng)
        session.run(other.op)
    before = session.run(shared.networks.variables())
    deltas = _set_change(session, anchor, weights, rng)
    _, staleness = session.run([pushed.op, pushed.staleness])
    assert staleness == others
    for after, was, change in zip(session.run(shared.networks.variables()), before, deltas, strict=True):
        np.testing.assert_allclose(after, was + change, rtol=1e-5, atol=1e-6)
    assert session.run(shared.counters["global_step"]) == others + 1


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_change_that_is_not_finite_anywhere_is_pushed_as_none_and_still_counted(session, bad):
    shared = Shared.create(CONFIG, OBS, ACT)
    anchor, weights, _, pushed, finite = _worker(shared, "worker")
    session.run(tf.compat.v1.global_variables_initializer())
    before = session.run(shared.networks.variables())
    _set_change(session, anchor, weights, np.random.default_rng(0))
    session.run(weights[-1][0].assign(bad))  # one value of one weight, the rest of the change finite
    _, was_finite = session.run([pushed.op, finite])
    assert not was_finite
    for after, was in zip(session.run(shared.networks.variables()), before, strict=True):
        np.testing.assert_array_equal(after, was)
    assert session.run(shared.counters["global_step"]) == 1
