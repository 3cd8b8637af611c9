"""Evaluation episodes serial (one environment in this process, as before) against spread over worker processes
(`BatchEnv.run_episodes`, one process per usable CPU); one JSON line.

Per task: serial_s and parallel_s for `--episodes` deterministic episodes of a random policy of the preset's
network sizes (`bench_env_placement.random_policy`, whose import also makes this process's numerics
single-threaded, as in the worker processes), with the observation statistics of a run mid-training; speedup =
serial_s / parallel_s, measured in the same run, one after the other. Both sides are timed on environments already
made (the trainer's evaluations reuse theirs); each is the best of `--repeats`, and the returns of both are
checked equal. The build machine is shared with other work, so the figures are rough: compare the ratio, not the
seconds, and read it against the load averages printed (load_before, load_after: 1-minute load, from
`os.getloadavg`). With the cores busy with others' work, spreading the episodes over processes gains nothing.

    .venv/bin/python benchmarks/bench_parallel_evaluation.py [--episodes 10] [--repeats 2] [--presets pendulum cheetah]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from bench_env_placement import PRESETS, random_policy  # benchmarks/, the script's directory

from agents_operator import presets
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.envs.make import usable_cpus
from agents_operator.trainer.ppo.normalize import Moments, Normalizer


def best(repeats: int, play) -> tuple[float, tuple]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = play()
        times.append(time.perf_counter() - started)
    return min(times), result


def measure(preset: str, episodes: int, repeats: int) -> dict[str, object]:
    config = presets.resolve(preset, {})
    seed = 1_000_000
    with LocalEpisodes(config.env_id, config.max_episode_steps) as serial:  # made on first use, here
        dim, act_dim = serial.observation_shape[0], serial.action_shape[0]
        policy = random_policy(config, dim, act_dim)
        observations = Normalizer((dim,), config.clip_observations)
        observations.shared = Moments(100.0, np.zeros(dim), np.full(dim, 100.0))
        serial_s, want = best(repeats, lambda: serial.run_episodes(policy, observations, episodes, seed))
    with BatchEnv.for_episodes(config.env_id, config.max_episode_steps, episodes) as parallel:
        parallel.run_episodes(policy, observations, parallel.num_processes, 0)  # make the environments first
        parallel_s, got = best(repeats, lambda: parallel.run_episodes(policy, observations, episodes, seed))
        processes = parallel.num_processes
    return {
        "preset": preset,
        "env_id": config.env_id,
        "processes": processes,
        "steps": sum(want[1]),
        "serial_s": round(serial_s, 3),
        "parallel_s": round(parallel_s, 3),
        "speedup": round(serial_s / parallel_s, 2),
        "same_returns": got == want,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = [measure(preset, args.episodes, args.repeats) for preset in args.presets]
    summary = {"cores": usable_cpus(), "episodes": args.episodes, "machine": "shared", "load_before": load_before}
    print(json.dumps({**summary, "load_after": os.getloadavg()[0], "results": results}))


if __name__ == "__main__":
    main()
