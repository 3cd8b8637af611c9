"""What a BatchEnv and its workers say to each other (envs/messages.py): named kinds and their arguments, the
messages sent most pickled once."""

from __future__ import annotations

import pickle

from agents_operator.trainer.envs import messages
from agents_operator.trainer.envs.messages import Kind


def test_the_step_and_close_messages_are_pickled_once() -> None:
    assert pickle.loads(messages.STEP) == (Kind.STEP, ())
    assert pickle.loads(messages.CLOSE) == (Kind.CLOSE, ())
    assert pickle.loads(messages.encode(Kind.EPISODE, messages.Episode({}, 3))) == (Kind.EPISODE, ({}, 3))
