"""benchmarks/bench_elastic.py's pieces: the job it scales, when a trainer first pushed (its log), the job's rate
over a phase (the shared counter's growth). The benchmark itself runs minutes of training: not a test."""

from __future__ import annotations

import time
from datetime import datetime

from agents_operator import api
from benchmarks import bench_elastic


def test_the_benchmarks_job_is_an_elastic_async_job_that_starts_with_one_worker():
    job = api.parse_job(bench_elastic.elastic_job())
    assert job.spec.elastic.max_workers == 2 and job.spec.replica_specs.worker.replicas == 1
    assert job.config.mode == "async"


def test_the_first_push_is_the_first_progress_line_after_the_request(tmp_path):
    log = tmp_path / "worker.log"
    assert bench_elastic.first_push(log, 0) is None
    log.write_text(
        "2026-12-02 12:00:00,000 INFO worker 1 serving at localhost:1\n"
        "2026-12-02 12:00:05,250 INFO 2.0k/5.0M steps  return -1200.0  400 steps/s  ETA 3h\n"
        "2026-12-02 12:00:15,500 INFO 8.0k/5.0M steps  return -1100.0  500 steps/s  ETA 3h\n"
    )
    first = datetime(2026, 12, 2, 12, 0, 5, 250000).timestamp()
    assert bench_elastic.first_push(log, 0) == first
    assert bench_elastic.first_push(log, first + 1) == first + 10.25
    assert bench_elastic.first_push(log, time.time()) is None


def test_the_rate_is_the_counters_growth_inside_the_window():
    points = [(0.0, 0), (10.0, 1000), (20.0, 3000), (30.0, 7000)]
    assert bench_elastic.rate(points, 0, 20) == 150.0
    assert bench_elastic.rate(points, 15, 30) == 400.0
    assert bench_elastic.rate(points, 25, 30) is None  # one point: no rate
