"""`envs.worker` and `envs.messages`: a worker process runs one handler per message kind, and a kind it has no
handler for is an error that names it, in the worker and, re-raised, in the parent."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from agents_operator.trainer.envs import messages, worker
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.messages import Kind
from agents_operator.trainer.envs.types import EnvProcessError


def test_every_kind_but_close_has_a_handler() -> None:
    assert set(worker._HANDLERS) == set(Kind) - {Kind.CLOSE}


@pytest.mark.parametrize("kind", ["step", "bogus", Kind.CLOSE])
def test_a_kind_without_a_handler_is_an_error_naming_it(kind: object) -> None:
    # Plain strings (the old protocol) are unknown kinds too; CLOSE is the loop's own, never dispatched.
    with pytest.raises(messages.UnknownKind, match=re.escape(repr(kind))):
        worker.dispatch(worker._Worker(buffer_fd=-1, parent=0), kind, ())


def test_an_unknown_kind_is_re_raised_in_the_parent_and_the_batch_goes_on() -> None:
    with BatchEnv("Pendulum-v1", num_envs=2, envs_per_process=2) as env:
        env.reset()
        handle = env._workers[0]
        handle.send(pickle.dumps(("bogus", ())))
        with pytest.raises(EnvProcessError, match=r"its message loop raised(.|\n)*UnknownKind(.|\n)*'bogus'"):
            handle.receive()
        assert env.step(np.zeros((2, 1), np.float32)).rewards.shape == (2,)


def test_the_step_and_close_messages_are_pickled_once() -> None:
    assert pickle.loads(messages.STEP) == (Kind.STEP, ())
    assert pickle.loads(messages.CLOSE) == (Kind.CLOSE, ())
    assert pickle.loads(messages.encode(Kind.EPISODE, messages.Episode({}, 3))) == (Kind.EPISODE, ({}, 3))
