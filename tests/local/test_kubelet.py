"""A pod's processes (local/kubelet.py): what a replica leaves behind is killed when it exits, a sidecar that
dies is restarted as the kubelet restarts one."""

import sys

from agents_operator import local
from tests.local.standins import job, run, script


def test_what_a_replica_leaves_behind_is_killed_when_it_exits_not_at_the_end(tmp_path):
    """An exited replica's group id is free for reuse by then: killing leftovers later could hit a stranger."""
    marker = tmp_path / "orphan"
    worker = script(f"""
        import os, subprocess, sys, time
        marker = {str(marker)!r}
        if os.environ["AGENTS_REPLICA_INDEX"] == "1":
            orphan = subprocess.Popen(["sleep", "300"])  # in worker-1's process group
            open(marker + ".tmp", "w").write(str(orphan.pid))
            os.rename(marker + ".tmp", marker)
            sys.exit(0)
        deadline = time.monotonic() + 20
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(open(marker).read())
        while os.path.exists(f"/proc/{{pid}}") and open(f"/proc/{{pid}}/stat").read().split()[2] != "Z":
            if time.monotonic() > deadline:
                sys.exit(3)  # still there while the job runs
            time.sleep(0.05)
    """)
    launcher, outcome = run(job(worker, worker_policy="ExitCode", success="AllWorkers"), tmp_path)
    assert outcome.succeeded, outcome
    assert [r.exit_code for r in launcher.replicas[1:]] == [0, 0]


def test_a_sidecar_that_dies_is_restarted_without_using_the_backoff_limit(tmp_path):
    marker = tmp_path / "sidecar-starts"
    sidecar = script(f"""
        import os, sys, time
        with open({str(marker)!r}, "a") as f:
            f.write("x")
        sys.exit(1 if len(open({str(marker)!r}).read()) < 3 else time.sleep(60))
    """)
    worker = script(f"""
        import os, time
        while not os.path.exists({str(marker)!r}) or len(open({str(marker)!r}).read()) < 3:
            time.sleep(0.1)
    """)
    j = job(worker, workers=1, backoff=0)
    j.spec.environments.placement = "sidecar"
    launcher = local.Launcher(j, tmp_path, out=sys.stderr)
    for replica in launcher.replicas:
        if replica.sidecar:
            replica.argv = sidecar
    outcome = launcher.run()
    assert outcome.succeeded, outcome
    assert launcher.restarts == 0
    assert marker.read_text() == "xxx"
