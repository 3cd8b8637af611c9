"""What `agents-operator local` prints (local/console.py): the launcher's lines, the last error of a replica,
the closing summary (issue 15, part 5)."""

import io
import os
import sys
import time

from agents_operator import contract, exported, local
from agents_operator.local import console
from agents_operator.reconcile import rules
from agents_operator.trainer import rundir
from agents_operator.trainer.progress import Progress
from tests.local.standins import job, run, script


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_last_error_is_the_latest_attempts_error_line():
    log = "\n".join(
        [
            console.attempt_line(1),
            "agents-operator train: error: old problem",
            console.attempt_line(2),
            "2026-12-01 INFO waiting for ps-0",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "ValueError: env servers serve 4 environments in all, envs_per_worker is 8",
            "",
        ]
    )
    assert console.last_error(log) == "ValueError: env servers serve 4 environments in all, envs_per_worker is 8"
    assert console.last_error(console.attempt_line(3) + "\nsegfault at 0x0\n") == "segfault at 0x0"
    assert console.last_error(console.attempt_line(1) + "\n") is None


def tracker(**metrics):
    t = console.Tracker(16384, io.StringIO())
    t.last = metrics
    return t


def test_the_evaluation_return_heads_the_summary_and_says_what_it_is():
    summary = tracker(
        **{
            contract.METRIC_ENV_STEPS: 16384.0,
            contract.METRIC_MEAN_RETURN: -1307.1,
            contract.METRIC_EVAL_RETURN: -969.3,
        }
    ).summary()
    assert summary.index("eval return -969.3 (deterministic policy") < summary.index("training return -1307.1")
    assert summary.startswith("16,384 env steps")
    assert "mean return" not in tracker(**{contract.METRIC_MEAN_RETURN: -5.0}).summary()


def test_the_chiefs_final_record_replaces_lagging_metrics_only_when_this_run_wrote_it(tmp_path):
    t = tracker(**{contract.METRIC_ENV_STEPS: 14336.0, contract.METRIC_EVAL_RETURN: -900.0})
    since = time.time()
    rundir.write_summary(tmp_path, {"env_steps": 16384, "global_step": 8, "iterations": 16})
    t.display = Progress(16384, Terminal())
    t.display.update(14336, None, 1.0)
    t.finish(tmp_path, since)
    assert t.last[contract.METRIC_ENV_STEPS] == 16384 and t.last[contract.METRIC_GLOBAL_STEP] == 8
    assert t.display.stream.getvalue().endswith("100% 16.4k/16.4k steps  return -\n")  # the bar shows it, ended
    assert t.last[contract.METRIC_EVAL_RETURN] == -900.0
    old = tracker(**{contract.METRIC_ENV_STEPS: 0.0})
    os.utime(tmp_path / rundir.SUMMARY_FILE, (since - 60, since - 60))
    old.finish(tmp_path, since)
    assert old.last[contract.METRIC_ENV_STEPS] == 0.0


def test_a_failure_shows_the_replicas_error_line_and_no_guess_about_progress(tmp_path):
    worker = script("""
        import sys
        print("agents-operator train: error: --set learning_rat: unknown setting", file=sys.stderr)
        sys.exit(2)
    """)
    launcher, outcome = run(job(worker, worker_policy="ExitCode"), tmp_path)
    lines = launcher.closing_lines(outcome)
    assert lines[0].startswith("Failed (PermanentExitCode): pod t-worker-")
    assert lines[1].endswith(": agents-operator train: error: --set learning_rat: unknown setting")
    assert not any("no progress" in line for line in lines)


def test_without_an_error_line_or_progress_the_console_says_so(tmp_path):
    launcher = local.Launcher(job(["true"]), tmp_path, out=sys.stderr)
    lines = launcher.closing_lines(rules.Outcome("Succeeded", rules.CHIEF_SUCCEEDED, "t-worker-0 succeeded"))
    assert "  no progress was reported (the chief's /metrics never answered)" in lines


def test_progress_starts_from_the_first_known_count_not_from_an_unknown_one(monkeypatch):
    """A resumed run's chief knows its counters only after restoring: its steps are not this run's speed."""
    now = [10.0]
    monkeypatch.setattr(console.time, "monotonic", lambda: now[0])
    t = console.Tracker(16384, io.StringIO())
    t.update({contract.METRIC_MEAN_RETURN: -5.0})  # served before the counters are known: no baseline
    assert t.last == {}
    t.update({contract.METRIC_ENV_STEPS: 8192.0})
    now[0] = 12.0
    t.update({contract.METRIC_ENV_STEPS: 10240.0})
    assert t.rate == 1024.0


def test_a_previous_runs_video_is_not_announced(tmp_path):
    launcher = local.Launcher(job(["true"]), tmp_path, out=sys.stderr)
    video = tmp_path / rundir.VIDEO
    video.parent.mkdir()
    video.write_bytes(b"GIF89a")
    done = rules.Outcome("Succeeded", rules.CHIEF_SUCCEEDED, "t-worker-0 succeeded")
    assert f"  video: {video}" in launcher.closing_lines(done)
    os.utime(video, (launcher.since - 60, launcher.since - 60))
    assert not any(line.startswith("  video:") for line in launcher.closing_lines(done))


def test_the_export_of_this_run_is_announced_with_how_to_use_it(tmp_path):
    launcher = local.Launcher(job(["true"]), tmp_path, out=sys.stderr)
    metadata = tmp_path / exported.DIRECTORY / exported.METADATA
    metadata.parent.mkdir()
    metadata.write_text("{}")
    done = rules.Outcome("Succeeded", rules.CHIEF_SUCCEEDED, "t-worker-0 succeeded")
    line = f"  exported policy: {metadata.parent}  (agents-operator evaluate --model {metadata.parent})"
    assert line in launcher.closing_lines(done)
    os.utime(metadata, (launcher.since - 60, launcher.since - 60))  # a previous run's
    assert not any(line.startswith("  exported policy:") for line in launcher.closing_lines(done))


def test_the_summary_counts_what_the_chief_recorded_at_the_end_not_its_last_metrics(tmp_path):
    """The stand-in chief serves 14,336 steps (before the other worker's last push), then records 16,384."""
    worker = script(f"""
        import http.server, os, sys, threading, time
        if os.environ["AGENTS_REPLICA_INDEX"] != "0":
            sys.exit(0)
        body = b"agents_trainer_env_steps 14336.0\\nagents_trainer_eval_mean_return -969.3\\n"
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(body)
            def log_message(self, *a): pass
        server = http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        time.sleep(2.5)
        server.shutdown()
        open({str(tmp_path / rundir.SUMMARY_FILE)!r}, "w").write("env_steps: 16384\\nglobal_step: 8\\n")
    """)
    launcher = local.Launcher(job(worker), tmp_path, out=sys.stderr)
    for r in launcher.replicas:
        r.env["PORT"] = str(launcher.metrics_port)
    outcome = launcher.run()
    assert outcome.succeeded
    summary = launcher.tracker.summary()
    assert summary.startswith("16,384 env steps, global step 8, eval return -969.3"), summary
