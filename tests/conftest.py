"""Settings for the whole suite."""

import os

MAX_WORKERS = 4
"""`make test` runs the suite on up to this many pytest-xdist workers (`-n auto`): each may start a job's
replicas and their environment processes, so more workers than cores only adds contention."""


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))
