"""The local launcher (local/launcher.py) with stand-in replicas (plain commands), so its policies are tested
without TensorFlow: success, restart policies, the backoff limit, the deadline, progress, Ctrl-C."""

import signal
import subprocess
import sys
import time

import yaml

from agents_operator import contract, local
from agents_operator.api import parse_job
from tests.local.standins import PY, alive, descendants, job, run, script

# `agents-operator` as a terminal starts it. A shell that runs the tests in the background hands its children
# SIGINT ignored, and Python keeps it ignored; Ctrl-C must still work in the test.
WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from agents_operator.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_success_stops_the_parameter_servers(tmp_path):
    launcher, outcome = run(job(["true"]), tmp_path)
    assert outcome.succeeded
    ps = launcher.replicas[0]
    assert ps.process.poll() is not None  # stopped by the launcher, not left behind
    assert (tmp_path / "logs" / "t-ps-0.log").exists()


def test_all_workers_policy_waits_for_every_worker(tmp_path):
    worker = script("""
        import os, sys, time
        time.sleep(0.2 if os.environ["AGENTS_REPLICA_INDEX"] == "0" else 1.5)
    """)
    launcher, outcome = run(job(worker, success="AllWorkers"), tmp_path)
    assert outcome.succeeded
    assert [r.exit_code for r in launcher.replicas[1:]] == [0, 0]


def test_exit_code_policy_fails_on_a_permanent_error(tmp_path):
    launcher, outcome = run(job(["sh", "-c", "exit 3"], worker_policy="ExitCode"), tmp_path)
    assert not outcome.succeeded
    assert (outcome.condition, outcome.reason) == ("Failed", "PermanentExitCode") and "exit code 3" in outcome.message
    assert launcher.restarts == 0 and launcher.status["state"] == "Failed"


def test_exit_code_policy_retries_signals_until_the_backoff_limit(tmp_path):
    marker = tmp_path / "attempts"
    worker = script(f"""
        import os, signal
        p = {str(marker)!r} + os.environ["AGENTS_REPLICA_INDEX"]
        n = int(open(p).read()) if os.path.exists(p) else 0
        open(p, "w").write(str(n + 1))
        if n < 1:
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    launcher, outcome = run(job(worker, worker_policy="ExitCode", backoff=2), tmp_path)
    assert outcome.succeeded, outcome
    assert launcher.restarts >= 1
    assert "attempt 2" in (tmp_path / "logs" / "t-worker-0.log").read_text()


def test_backoff_limit_bounds_restarts_across_the_job(tmp_path):
    launcher, outcome = run(job(["sh", "-c", "exit 1"], worker_policy="OnFailure", backoff=3), tmp_path)
    assert not outcome.succeeded
    assert outcome.reason == "BackoffLimitExceeded"
    assert launcher.restarts == 3


def test_active_deadline_stops_the_job(tmp_path):
    data = job(["sleep", "60"]).model_dump(by_alias=True, exclude_none=True)
    data["spec"]["runPolicy"]["activeDeadlineSeconds"] = 1
    launcher, outcome = run(parse_job(data), tmp_path)
    assert (outcome.succeeded, outcome.reason) == (False, "DeadlineExceeded")
    assert not any(r.running for r in launcher.replicas)


def test_never_policy_fails_at_once(tmp_path):
    _, outcome = run(job(["sh", "-c", "kill -9 $$"], worker_policy="Never"), tmp_path)
    assert outcome.reason == "PodFailed" and "exit code 137" in outcome.message


def test_progress_comes_from_the_chiefs_metrics(tmp_path):
    worker = script("""
        import http.server, os, sys, threading, time
        if os.environ["AGENTS_REPLICA_INDEX"] != "0":
            sys.exit(0)
        argv = sys.argv
        port = int(os.environ["PORT"])
        body = b"agents_trainer_env_steps 1200.0\\nagents_trainer_mean_return -180.5\\nagents_trainer_global_step 7\\n"
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(body)
            def log_message(self, *a): pass
        server = http.server.HTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        time.sleep(3)
    """)
    j = job(worker)
    launcher = local.Launcher(j, tmp_path, out=sys.stderr)
    for r in launcher.replicas:
        r.env["PORT"] = str(launcher.metrics_port)
    outcome = launcher.run()
    assert outcome.succeeded
    assert launcher.tracker.last[contract.METRIC_MEAN_RETURN] == -180.5
    assert "training return -180.5" in launcher.tracker.summary()
    # ... and in the status file, as the operator writes status.progress
    written = yaml.safe_load((tmp_path / "logs" / local.STATUS_FILE).read_text())
    assert {k: v for k, v in written["progress"].items() if k != "updatedAt"} == {
        "globalStep": 7,
        "envSteps": 1200,
        "meanReturn": -180.5,
    }


def test_ctrl_c_stops_every_process(tmp_path):
    manifest = tmp_path / "job.yaml"
    spawner = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    data = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "c"},
        "spec": {
            "replicaSpecs": {
                "ps": {"template": {"spec": {"containers": [{"name": "agents", "command": ["sleep", "300"]}]}}},
                "worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "agents", "command": [PY, "-c", spawner]}]}},
                },
            }
        },
    }
    manifest.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen(
        [PY, "-c", WITH_CTRL_C, "local", str(manifest), "--logdir", str(tmp_path / "run"), "--no-video"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while len(children := descendants(proc.pid)) < 5 and time.monotonic() < deadline:  # ps, two workers, two sleeps
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    assert len(children) >= 5, children
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Interrupted" in err and "Traceback" not in err
    time.sleep(0.5)
    assert [pid for pid in children if alive(pid)] == []


def test_a_permanent_failure_ends_the_job_before_what_failed_with_it_is_restarted(tmp_path):
    """The ps (restartPolicy Always) and a worker (ExitCode) fail with the same usage error at once."""
    j = job(["sh", "-c", "exit 2"], ps_cmd=("sh", "-c", "exit 2"), workers=1, worker_policy="ExitCode")
    j.spec.replica_specs.ps.restart_policy = "Always"
    launcher = local.Launcher(j, tmp_path, out=sys.stderr)
    launcher.step()  # creates the pods: starts the processes
    for replica in launcher.replicas:
        replica.process.wait()
    launcher.step()
    launcher.stop_all()
    assert (launcher.outcome().reason, launcher.failed.name) == ("PermanentExitCode", "worker-0")
    assert [r.attempts for r in launcher.replicas] == [1, 1]  # the ps is not restarted
