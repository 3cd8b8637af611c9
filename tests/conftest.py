"""Settings for the whole suite: how `make test` spreads it over pytest-xdist workers; and `trained`, the one
fixture that test files of several packages share (an exported run)."""

import os

import pytest
from xdist.scheduler import LoadScopeScheduling

MAX_WORKERS = 4
"""`make test` runs the suite on up to this many workers (`-n auto`): each may start a job's replicas and
their environment processes, so more workers than cores only adds contention."""
E2E = "tests/e2e/"


@pytest.hookimpl(optionalhook=True)  # defined by pytest-xdist: `-p no:xdist` runs without it
def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


class OneClusterScheduling(LoadScopeScheduling):
    """Each test goes to whichever worker is free, except the e2e tests: one worker runs them all, in order.
    They share one cluster, one chart install and the operator of the session, which listens on fixed ports
    (and some start operators of their own before it starts).

    Grouping by mark (`--dist loadgroup`) does not work with pytest 9.2, whose node ids xdist 3.8 cannot
    rename, so the grouping is by path here."""

    def _split_scope(self, nodeid: str) -> str:
        return E2E if nodeid.startswith(E2E) else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return OneClusterScheduling(config, log)


EXPORT_RUN = {
    "envs_per_worker": 2,
    "envs_per_process": 2,
    "rollout_steps": 64,
    "minibatches": 4,
    "epochs": 2,
    "eval_every": 0,
    "eval_episodes": 2,
    "max_episode_steps": 40,
    "total_steps": 128,
    "metrics_port": 0,
    "video_episodes": 0,
}
"""The settings of `trained`: one iteration of the pendulum preset, with short episodes."""


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A run of one iteration, which the chief ends by exporting its policy to exported/: for the tests of the
    trainer's export (tests/trainer/test_export.py), of playing a policy (test_playback.py) and of the loader
    (tests/exported/test_policy.py). Trained once per session (per pytest-xdist worker that needs it)."""
    from agents_operator import presets
    from agents_operator.trainer import loop

    logdir = tmp_path_factory.mktemp("export") / "run"
    config = presets.resolve("pendulum", EXPORT_RUN)
    loop.train(config, logdir, preset="pendulum")
    return config, logdir
