"""The local launcher with stand-in replicas (plain commands), so its policies are tested without TensorFlow."""

import http.server
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import yaml

from agents_operator import contract, local, scrape, tfconfig
from agents_operator.api import parse_job

PY = sys.executable
# `agents-operator` as a terminal starts it. A shell that runs the tests in the background hands its children
# SIGINT ignored, and Python keeps it ignored; Ctrl-C must still work in the test.
WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from agents_operator.cli import main; sys.exit(main(sys.argv[1:]))"
)


def job(worker_cmd, ps_cmd=("sleep", "60"), workers=2, worker_policy="OnFailure", backoff=3, success="ChiefWorker"):
    def template(cmd):
        return {"spec": {"containers": [{"name": "agents", "command": list(cmd)}]}}

    return parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "t"},
            "spec": {
                "replicaSpecs": {
                    "ps": {"replicas": 1, "template": template(ps_cmd)},
                    "worker": {"replicas": workers, "restartPolicy": worker_policy, "template": template(worker_cmd)},
                },
                "runPolicy": {"backoffLimit": backoff},
                "successPolicy": success,
            },
        }
    )


def script(body: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(body)]


def run(j, tmp_path):
    launcher = local.Launcher(j, tmp_path, out=sys.stderr)
    return launcher, launcher.run()


def test_plan_maps_hosts_to_localhost_and_keeps_the_rendered_environment(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(Path(__file__).resolve().parents[2] / "examples" / "pendulum.yaml")
    replicas = local.plan(j, tmp_path, ports={"ps-0": 40001, "worker-0": 40002, "worker-1": 40003}, metrics_port=9999)
    assert [r.name for r in replicas] == ["ps-0", "worker-0", "worker-1"]
    cfg = tfconfig.parse(replicas[2].env["TF_CONFIG"])
    assert cfg.cluster == {"ps": ["localhost:40001"], "worker": ["localhost:40002", "localhost:40003"]}
    assert (cfg.task_type, cfg.task_index) == ("worker", 1)
    argv = replicas[1].argv
    assert argv[:4] == [PY, "-m", "agents_operator", "train"]
    assert argv[argv.index("--logdir") + 1] == str(tmp_path)
    assert "metrics_port=9999" in argv and argv[-1] == "--resume"
    assert replicas[0].env["AGENTS_REPLICA_TYPE"] == "ps"
    assert replicas[1].log_path == tmp_path / "logs" / "pendulum-worker-0.log"


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
    while len(children := _descendants(proc.pid)) < 5 and time.monotonic() < deadline:  # ps, two workers, two sleeps
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    assert len(children) >= 5, children
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Interrupted" in err and "Traceback" not in err
    time.sleep(0.5)
    assert [pid for pid in children if _alive(pid)] == []


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,sid="], capture_output=True, text=True).stdout
    rows = [tuple(map(int, line.split())) for line in out.splitlines()]
    found, frontier = [], {pid}
    while frontier:
        children = [p for p, pp, _ in rows if pp in frontier]
        found += children
        frontier = set(children)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")


def test_scrape_leaves_out_what_is_not_measured_yet():
    body = b"# HELP x y\nagents_trainer_env_steps 5.0\nagents_trainer_mean_return NaN\n"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert scrape.scrape(url) == {"agents_trainer_env_steps": 5.0}
    finally:
        server.shutdown()
    assert scrape.scrape(url, timeout=0.5) is None  # nobody listens any more


# --- env servers as local processes ----------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_plan_runs_remote_env_servers_on_local_ports_and_tells_each_worker_its_own(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(EXAMPLES / "cheetah-remote.yaml")
    ports = {f"envserver-{i}": 41000 + i for i in range(4)}
    replicas = local.plan(j, tmp_path, ports=ports)
    assert [r.name for r in replicas] == ["ps-0", *(f"envserver-{i}" for i in range(4)), "worker-0", "worker-1"]
    for i, server in enumerate(replicas[1:5]):
        assert server.argv[:4] == [PY, "-m", "agents_operator", "env-server"]
        assert server.argv[server.argv.index("--port") + 1] == str(41000 + i)
        assert server.restart_policy == "Never"  # the pod's: the plan replaces it, by its OnFailure
        assert server.log_path == tmp_path / "logs" / f"cheetah-remote-envserver-{i}.log"
    for worker in (0, 1):
        env = replicas[5 + worker].env
        servers = tfconfig.parse_env_servers(env[tfconfig.ENV_SERVERS_VAR])
        assert servers.addresses == (f"localhost:{41000 + 2 * worker}", f"localhost:{41001 + 2 * worker}")


def test_plan_gives_each_sidecar_its_own_port(tmp_path):
    from agents_operator import manifests

    j = manifests.load_job(EXAMPLES / "pendulum-sidecar.yaml")
    replicas = local.plan(j, tmp_path, ports={"worker-0/env-server": 42000, "worker-1/env-server": 42001})
    names = [r.name for r in replicas]
    assert names == ["ps-0", "worker-0/env-server", "worker-0", "worker-1/env-server", "worker-1"]
    for worker in (0, 1):
        sidecar, trainer = replicas[1 + 2 * worker], replicas[2 + 2 * worker]
        assert sidecar.sidecar == "env-server" and sidecar.restart_policy == "Always"
        assert sidecar.argv[sidecar.argv.index("--port") + 1] == str(42000 + worker)
        assert sidecar.log_path == tmp_path / "logs" / f"pendulum-sidecar-worker-{worker}.env-server.log"
        servers = tfconfig.parse_env_servers(trainer.env[tfconfig.ENV_SERVERS_VAR])
        assert servers == tfconfig.EnvServers((f"localhost:{42000 + worker}",), "rollout")


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


def test_the_launchers_settings_replace_the_jobs_own_in_the_launch(tmp_path):
    manifest = yaml.safe_load((EXAMPLES / "hopper.yaml").read_text())
    manifest["spec"]["trainer"]["metricsPort"] = 9100  # the job's own: replaced, not followed, by the launcher's
    j = parse_job(manifest)
    assert j.overrides["metrics_port"] == 9100
    worker = next(r for r in local.plan(j, tmp_path, metrics_port=9999, video=False) if r.name == "worker-0")
    settings = [worker.argv[i + 1] for i, a in enumerate(worker.argv) if a == "--set"]
    assert [s for s in settings if s.startswith(("metrics_port=", "video_episodes="))] == [
        "metrics_port=9999",
        "video_episodes=0",
    ]
    assert worker.argv[worker.argv.index("--logdir") + 1] == str(tmp_path)
    assert worker.env["AGENTS_LOGDIR"] == str(tmp_path)
