"""Sampling throughput of BatchEnv against the raw single-process loop; prints one JSON line.

For each environment it measures, best of `--repeats` alternating rounds (the build machine is shared, so
the best round is the least disturbed one):
- raw_steps_per_s: one environment in this process, random actions, resets included;
- parallel_raw_steps_per_s: `cores` such loops in separate processes at once, without any exchange: what
  perfect batching would reach on this machine as loaded as it is now;
- batch_steps_per_s: BatchEnv over every usable CPU, random actions;
- policy_steps_per_s: the same with the trainer's acting cost, a numpy MLP (256, 256) forward pass and a
  Gaussian sample on the batch of observations.
ratio = policy_steps_per_s / (raw_steps_per_s * cores) is the share of the machine's raw simulation speed
that sampling for PPO keeps (goal: 0.85 or more; random_ratio is the same without the policy).
efficiency = policy_steps_per_s / parallel_raw_steps_per_s is the same against what the cores delivered
while measuring: it tells the cost of the batching from the noise of a shared machine.

    .venv/bin/python benchmarks/sampling.py --envs 16 --seconds 5
"""

from __future__ import annotations

import os

# Like the environment workers, this process must not spread numpy over threads the workers need.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from multiprocessing.queues import SimpleQueue  # noqa: E402
from multiprocessing.synchronize import Barrier  # noqa: E402

import numpy as np  # noqa: E402

from agents_operator.trainer.envs import BatchEnv, make_env, usable_cpus  # noqa: E402

ENV_IDS = ("HalfCheetahBulletEnv-v0", "AntBulletEnv-v0")


def raw_steps_per_s(env_id: str, steps: int, seconds: float, barrier: Barrier | None = None) -> float:
    env = make_env(env_id)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    if barrier is not None:
        barrier.wait()
    low, high = env.action_space.low, env.action_space.high
    done, started = 0, time.perf_counter()
    while done < steps and time.perf_counter() - started < seconds:
        for _ in range(100):
            action = rng.uniform(low, high).astype(np.float32)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        done += 100
    rate = done / (time.perf_counter() - started)
    env.close()
    return rate


def parallel_raw_steps_per_s(env_id: str, steps: int, seconds: float, cores: int) -> float:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(cores), context.SimpleQueue()
    processes = [
        context.Process(target=_put_raw_steps_per_s, args=(results, env_id, steps, seconds, barrier))
        for _ in range(cores)
    ]
    for process in processes:
        process.start()
    total = sum(results.get() for _ in processes)
    for process in processes:
        process.join()
    return total


def _put_raw_steps_per_s(results: SimpleQueue, *args: object) -> None:
    results.put(raw_steps_per_s(*args))


def mlp_policy(observation_size: int, action_size: int) -> Callable[[np.ndarray], np.ndarray]:
    """A local numpy copy of a (256, 256) tanh policy: how the trainer picks actions while sampling."""
    rng = np.random.default_rng(0)
    sizes = (observation_size, 256, 256, action_size)
    weights = [rng.normal(0, 1 / np.sqrt(m), (m, n)).astype(np.float32) for m, n in itertools.pairwise(sizes)]
    biases = [np.zeros(n, np.float32) for n in sizes[1:]]

    def act(observations: np.ndarray) -> np.ndarray:
        hidden = observations
        for w, b in zip(weights[:-1], biases[:-1], strict=True):
            hidden = np.tanh(hidden @ w + b)
        mean = hidden @ weights[-1] + biases[-1]
        return mean + 0.5 * rng.standard_normal(mean.shape, np.float32)

    return act


def batch_steps_per_s(env: BatchEnv, policy: bool, steps: int, seconds: float) -> float:
    rng = np.random.default_rng(0)
    shape = (env.num_envs, *env.action_shape)
    if policy:
        act = mlp_policy(env.observation_shape[0], env.action_shape[0])
    else:

        def act(observations: np.ndarray) -> np.ndarray:
            return rng.uniform(env.action_low, env.action_high, shape)

    observations = env.reset()
    for _ in range(10):  # warm-up: first resets, caches
        observations = env.step(act(observations)).observations
    done, started = 0, time.perf_counter()
    while done < steps and time.perf_counter() - started < seconds:
        observations = env.step(act(observations)).observations
        done += env.num_envs
    return done / (time.perf_counter() - started)


def measure(env_id: str, args: argparse.Namespace, cores: int) -> dict[str, float | int]:
    best = {"raw": 0.0, "parallel_raw": 0.0, "random": 0.0, "policy": 0.0}
    with BatchEnv(env_id, args.envs, envs_per_process=args.envs_per_process) as env:
        for _ in range(args.repeats):
            best["raw"] = max(best["raw"], raw_steps_per_s(env_id, args.steps, args.seconds))
            parallel = parallel_raw_steps_per_s(env_id, args.steps // cores, args.seconds, cores)
            best["parallel_raw"] = max(best["parallel_raw"], parallel)
            for kind in ("random", "policy"):
                rate = batch_steps_per_s(env, kind == "policy", args.steps, args.seconds)
                best[kind] = max(best[kind], rate)
        processes = env.num_processes
    return {
        "raw_steps_per_s": round(best["raw"]),
        "parallel_raw_steps_per_s": round(best["parallel_raw"]),
        "batch_steps_per_s": round(best["random"]),
        "policy_steps_per_s": round(best["policy"]),
        "processes": processes,
        "random_ratio": round(best["random"] / (best["raw"] * cores), 3),
        "ratio": round(best["policy"] / (best["raw"] * cores), 3),
        "efficiency": round(best["policy"] / best["parallel_raw"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-ids", nargs="+", default=list(ENV_IDS))
    parser.add_argument("--envs", type=int, default=16, help="environments in the batch")
    parser.add_argument("--envs-per-process", type=int, default=None, help="default: BatchEnv's (one process per CPU)")
    parser.add_argument(
        "--steps", type=int, default=100_000, help="most steps per measurement, all environments together"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="most seconds per measurement")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; the best one counts")
    args = parser.parse_args()
    cores = usable_cpus()
    results = {env_id: measure(env_id, args, cores) for env_id in args.env_ids}
    print(json.dumps({"cores": cores, "envs": args.envs, "results": results}))


if __name__ == "__main__":
    main()
