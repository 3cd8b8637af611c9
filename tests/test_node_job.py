"""benchmarks/bench_node_job.py's readings, offline: the milestones of a job and a pod's start latency."""

from __future__ import annotations

import pytest

from benchmarks import bench_node_job


def test_milestones_are_the_first_time_each_is_seen(monkeypatch):
    monkeypatch.setattr(bench_node_job, "POLL", 0)
    seen = iter(
        [
            (0, {}),
            (3, {"state": "Running"}),
            (3, {"state": "Running", "progress": {"globalStep": 4}}),
            (0, {"state": "Succeeded", "progress": {"globalStep": 9}}),
        ]
    )
    marks = bench_node_job._milestones(lambda: next(seen), 3, 60)
    assert set(marks) == {"running_s", "progress_s", "succeeded_s"}
    assert marks["running_s"] <= marks["progress_s"] <= marks["succeeded_s"]


def test_a_failed_job_ends_the_benchmark_with_its_status(monkeypatch):
    monkeypatch.setattr(bench_node_job, "POLL", 0)
    with pytest.raises(SystemExit, match="the job failed"):
        bench_node_job._milestones(lambda: (0, {"state": "Failed"}), 3, 60)


def test_start_latency_is_container_start_less_creation():
    pod = {
        "metadata": {"creationTimestamp": "2026-12-02T01:00:00Z"},
        "status": {"containerStatuses": [{"state": {"running": {"startedAt": "2026-12-02T01:00:07Z"}}}]},
    }
    assert bench_node_job._started(pod) == 7.0
    assert bench_node_job._started({"metadata": pod["metadata"], "status": {}}) is None
