"""Cluster protocols with real TensorFlow servers: start in any order, shared variables, ps exits by itself."""

import os
import subprocess
import sys
import threading
from pathlib import Path

from agents_operator import tfconfig
from agents_operator.local.processes import free_port

SCRIPT = Path(__file__).with_name("tiny_replica.py")


def test_one_ps_two_workers_started_in_any_order_and_the_ps_exits_by_itself():
    """The cluster lists three worker slots (an elastic job's most workers); slot 2 stays empty, as in a job
    scaled to two: nobody waits for it."""
    ports = [free_port() for _ in range(4)]
    cluster = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}

    def start(task_type, index):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "MEMBERS": "2"}  # the chief steps once both joined
        env["TF_CONFIG"] = tfconfig.TFConfig(cluster, task_type, index).to_json()
        return subprocess.Popen(
            [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    # Workers first: they must wait for the ps rather than crash.
    worker1 = start("worker", 1)
    worker0 = start("worker", 0)
    timer = threading.Event()
    timer.wait(3)
    ps = start("ps", 0)
    outputs = {}
    for name, proc in (("worker0", worker0), ("worker1", worker1), ("ps", ps)):
        outputs[name] = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, outputs[name]
    assert "waiting for ps-0" in outputs["worker1"]
    assert "initialising them" in outputs["worker0"]  # the chief initialises ...
    assert "initialising them" not in outputs["worker1"]  # ... the others wait for it
    assert "w = [1.0, 1.0, 1.0, 1.0]" in outputs["worker0"]  # shared variables converged
    assert "the chief finished the job, after every other worker: ps 0 exits" in outputs["ps"]
    joined = [line for line in outputs["worker0"].splitlines() if "joins" in line]
    assert joined and joined[0].endswith(("slots taken [0]", "slots taken [0, 1]")), outputs["worker0"]
    assert "gave up waiting" not in outputs["worker0"]
