"""Synchronous training with a backup worker: the real trainer's processes (1 ps and 3 sync workers, each with its
TF_CONFIG), `backup_workers: 1`. Worker 2 is frozen (SIGSTOP) for longer than many iterations: the others go on
stepping, each step the mean of the first two changes; thawed, its late change is dropped and logged, and the job
finishes with every process exiting 0."""

import re
import signal
import time

from agents_operator.local.processes import free_port
from agents_operator.trainer import rundir
from tests.distributed import test_elastic
from tests.distributed.test_elastic import start, wait_for_line

SETTINGS = {**test_elastic.SETTINGS, "mode": "sync", "backup_workers": 1, "total_steps": 300_000}
BATCH = SETTINGS["envs_per_worker"] * SETTINGS["rollout_steps"]
FROZEN_SECONDS = 25
"""Longer than two of the chief's progress lines (every 10 s), and than many iterations (well under 1 s each)."""


def env_steps(log: str) -> list[int]:
    """The shared env-step counts of a worker's progress lines ('12.3k/1.0M steps  return ...')."""
    return [_count(m) for m in re.findall(r"([\d.]+[kM]?)/[\d.]+[kM]? steps  return", log)]


def _count(text: str) -> int:
    sizes = {"k": 1e3, "M": 1e6}
    return int(float(text[:-1]) * sizes[text[-1]]) if text[-1] in sizes else int(text)


def test_a_frozen_sync_worker_does_not_stall_the_others_and_its_late_change_is_dropped(tmp_path):
    ports = [free_port() for _ in range(4)]
    cluster = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}
    logdir, out = tmp_path / "run", tmp_path
    names = [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]
    procs = {name: start(cluster, *name, logdir, out, SETTINGS) for name in names}
    chief_log = out / "worker-0.log"
    try:
        for index in (0, 2):
            wait_for_line(procs["worker", index], out / f"worker-{index}.log", " steps  return", 240)
        procs["worker", 2].send_signal(signal.SIGSTOP)
        before = len(env_steps(chief_log.read_text()))
        time.sleep(FROZEN_SECONDS)
        during = env_steps(chief_log.read_text())[before - 1 :]
        procs["worker", 2].send_signal(signal.SIGCONT)
        for name in names:
            assert procs[name].wait(300) == 0, (out / f"{name[0]}-{name[1]}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGCONT)
            proc.kill()
    assert len(during) >= 3 and during == sorted(during) and during[-1] > during[0], during  # it kept stepping
    chief = chief_log.read_text()
    assert re.search(r"sync: step \d+ applied; dropped the late change of worker 2 \(\d+ in all\)", chief)
    assert "the chief finished the job" in (out / "ps-0.log").read_text()
    assert rundir.load_summary(logdir)["global_step"] >= -(-SETTINGS["total_steps"] // (BATCH * 3))
