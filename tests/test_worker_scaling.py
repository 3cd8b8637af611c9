"""benchmarks/bench_worker_scaling.py's model, offline: the ps tasks' capacity and, with async updates in turn,
the turn's."""

from benchmarks import bench_worker_scaling


def test_concurrent_workers_scale_until_the_ps_tasks_are_busy():
    # a 2 s iteration costs a ps 0.05 s: one ps serves 40 workers at full speed, two serve 80
    assert bench_worker_scaling.predict(2.0, 0.05, 1_000, 64, 1)["speedup"] == 40.0
    assert bench_worker_scaling.predict(2.0, 0.05, 1_000, 64, 2)["speedup"] == 64.0


def test_workers_in_turn_scale_until_the_turn_is_busy():
    # each holds the turn 0.5 s of its 2 s iteration: four of them keep it busy, whatever the ps tasks serve
    predicted = bench_worker_scaling.predict(2.0, 0.05, 1_000, 64, 2, turn_seconds=0.5)
    assert (predicted["speedup"], predicted["efficiency"]) == (4.0, 0.062)
    assert bench_worker_scaling.predict(2.0, 0.05, 1_000, 3, 1, turn_seconds=0.5)["speedup"] == 3.0
