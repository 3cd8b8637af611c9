"""What runs in a BatchEnv's worker processes (envs/worker.py): one handler per message kind, a kind it has no
handler for an error that names it (in the worker and, re-raised, in the parent); Ctrl-C left to the parent,
and no worker outliving it."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from agents_operator.trainer.envs import messages, worker
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.messages import Kind
from agents_operator.trainer.envs.types import EnvProcessError
from tests.trainer.batch_envs import ECHO, PID, alive, wait_until_gone, worker_pids

pytestmark = pytest.mark.timeout(60)


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


# --- Ctrl-C is the parent's, and no worker outlives its parent -----------------------------------------


def test_workers_ignore_sigint() -> None:
    with BatchEnv(ECHO, num_envs=1) as env:
        (pid,) = worker_pids(env)
        os.kill(pid, signal.SIGINT)
        time.sleep(0.2)
        assert env.step(np.full((1, 2), 0.1)).observations[0, PID] == pid


PARENT = textwrap.dedent(
    """
    import signal, sys, time
    import numpy as np
    from agents_operator.trainer.envs.batch import BatchEnv
    from agents_operator.trainer.envs.noise import Noise
    from agents_operator.trainer.ppo.normalize import Normalizer
    from agents_operator.trainer.ppo.policy import NumpyPolicy

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if started in the background
    layer = lambda m, n: (np.zeros((m, n), np.float32), np.zeros(n, np.float32))
    policy = NumpyPolicy([layer(5, 2)], np.zeros(2, np.float32), [layer(5, 1)], "tanh")

    with BatchEnv(sys.argv[1], num_envs=2, envs_per_process=1) as env:
        print(*env.reset()[:, 4].astype(int), flush=True)
        while True:
            if sys.argv[2] == "step":
                env.step(np.zeros((2, 2)))
                time.sleep(0.01)
            else:  # a rollout far longer than the test waits
                env.collect(policy, Normalizer((5,), 10.0), Noise.per_step(np.zeros((1_000_000, 2, 2), np.float32)))
    """
)


@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("exchange", ["step", "collect"])
def test_workers_die_with_their_parent(signal_number: signal.Signals, exchange: str) -> None:
    """SIGKILL and SIGTERM kill the trainer alone (as the OOM killer would): its workers notice they are
    orphans. SIGINT is Ctrl-C, sent to the whole process group. Between steps or in the middle of a rollout
    that the workers run by themselves."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path or os.getcwd() for path in sys.path)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, ECHO, exchange],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        pids = {int(pid) for pid in parent.stdout.readline().split()}
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        time.sleep(1.0)  # into the rollout, or some steps on
        if signal_number == signal.SIGINT:
            os.killpg(parent.pid, signal_number)
        else:
            os.kill(parent.pid, signal_number)
        parent.wait(10)
        assert not wait_until_gone(pids)
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)  # what a failure left behind (the workers share its group)
