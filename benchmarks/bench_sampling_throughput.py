"""Sampling throughput of the trainer against the raw single-process loop; prints one JSON line.

For each preset's environment it measures, best of `--repeats` alternating rounds (the build machine is
shared, so the best round is the least disturbed one):
- raw_steps_per_s: one environment in this process, random actions, resets included;
- parallel_raw_steps_per_s: `cores` such loops in separate processes at once, without any exchange: what
  perfect batching would reach on this machine as loaded as it is now;
- batch_steps_per_s: BatchEnv over every usable CPU, random actions, all processes in lockstep (`step`);
- sampler_steps_per_s: the trainer's colocated sampling phase (`samplers.Sampler.collect`: the preset's policy
  and value networks in numpy, normalisation, GAE, rollouts of the preset's length) on that BatchEnv: each
  worker process acts for its own environments;
- pipelined_steps_per_s: the same rollouts with the policy acting in this process instead
  (`samplers.StepSampler`, as over env servers in step mode), for one process while the others simulate;
- lockstep_steps_per_s: the same, with every step waiting for all processes (the policy acting while they
  all wait), as a sampler without either would.
ratio = sampler_steps_per_s / (raw_steps_per_s * cores) is the share of the machine's raw simulation speed
that sampling for PPO keeps (goal: 0.85 or more); random_ratio, pipelined_ratio and lockstep_ratio are the
same for the others. efficiency = sampler_steps_per_s / parallel_raw_steps_per_s is the same against what
the cores delivered while measuring: it tells the cost of the batching from the noise of a shared machine.

training: the sampling phases of a real training run (`loop.train`, the preset with evaluation, video and
metrics off, `--train-iterations` iterations, the first rollout included), as the run itself timed them,
between raw and parallel raw measurements before and after it: training_ratio = its sampling rate over
raw x cores (the best raw loop of the whole measurement), training_efficiency = over the mean of the two
parallel raw measurements around it, and each iteration's sampling rate (collect_steps_per_s, in order).
training_simulation_share is the run's own `perf/simulation_share` over those phases: the share of the
worker processes' time that went to stepping the environments (the simulator, with the policy's actions),
the rest being the sampler's cost (acting, normalising, exchanges, waiting). Below training_ratio's 1, it
tells what the sampler could still gain (1 - share) from what the simulator costs under the policy being
trained, which can differ from its cost under random actions that the raw loops measure.

    .venv/bin/python benchmarks/bench_sampling_throughput.py --envs 16 --seconds 5 --train-iterations 4
"""

from __future__ import annotations

import os

# Like the environment workers, this process must not spread numpy over threads the workers need.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from multiprocessing.queues import SimpleQueue  # noqa: E402
from multiprocessing.synchronize import Barrier  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from agents_operator import presets  # noqa: E402
from agents_operator.config import TrainerConfig  # noqa: E402
from agents_operator.trainer import loop  # noqa: E402
from agents_operator.trainer.envs.batch import BatchEnv  # noqa: E402
from agents_operator.trainer.envs.make import make_env, usable_cpus  # noqa: E402
from agents_operator.trainer.envs.types import StepResult  # noqa: E402
from agents_operator.trainer.learner import Learner, vector_size  # noqa: E402
from agents_operator.trainer.ppo.policy import NumpyPolicy  # noqa: E402
from agents_operator.trainer.sampling.samplers import Sampler, StepSampler  # noqa: E402
from agents_operator.trainer.sampling.training_env import TrainingEnv  # noqa: E402

PRESETS = ("cheetah", "ant")


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


class _Lockstep:
    """A BatchEnv seen as a single group: every step of the sampler waits for all of its processes."""

    def __init__(self, env: BatchEnv):
        self.env = env
        self.groups = [range(env.num_envs)]

    def send_step(self, group: int, actions: np.ndarray) -> None:
        self._actions = actions

    def receive_step(self, group: int) -> StepResult:
        return self.env.step(self._actions)

    def __getattr__(self, name: str) -> object:
        return getattr(self.env, name)


def batch_steps_per_s(env: BatchEnv, steps: int, seconds: float) -> float:
    rng = np.random.default_rng(0)
    shape = (env.num_envs, *env.action_shape)
    env.reset()
    for _ in range(10):  # warm-up: first resets, caches
        env.step(rng.uniform(env.action_low, env.action_high, shape))
    done, started = 0, time.perf_counter()
    while done < steps and time.perf_counter() - started < seconds:
        env.step(rng.uniform(env.action_low, env.action_high, shape))
        done += env.num_envs
    return done / (time.perf_counter() - started)


def sampler_steps_per_s(sampler: Sampler, policy: NumpyPolicy, seconds: float) -> float:
    """Whole rollouts until `seconds` have passed."""
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        batch, _, _ = sampler.collect(policy)
        done += len(batch)
    return done / (time.perf_counter() - started)


def training(config: TrainerConfig, iterations: int) -> loop.RunResult:
    """A real training run of `iterations` iterations: sampling between updates, as the trainer does it."""
    quiet = {"eval_every": 0, "video_episodes": 0, "metrics_port": 0}
    run_config = config.model_copy(update={**quiet, "total_steps": iterations * config.batch_size})
    with tempfile.TemporaryDirectory() as scratch:
        return loop.train(run_config, Path(scratch) / "run")


def training_rates(config: TrainerConfig, args: argparse.Namespace, cores: int) -> dict[str, object]:
    """`training`'s sampling rate between raw measurements (see the module docstring); `raw` is the best
    single raw loop seen around it."""

    def raw_and_parallel() -> tuple[float, float]:
        raw = raw_steps_per_s(config.env_id, args.steps, args.seconds)
        return raw, parallel_raw_steps_per_s(config.env_id, args.steps // cores, args.seconds, cores)

    before = raw_and_parallel()
    result = training(config, args.train_iterations)
    after = raw_and_parallel()
    rate = result.sampling_steps / result.sampling_seconds
    raw = max(before[0], after[0])
    per_iteration = result.sampling_steps / len(result.collect_seconds)
    return {
        "training_sampling_steps_per_s": round(rate),
        "training_raw_steps_per_s": round(raw),
        "training_ratio": round(rate / (raw * cores), 3),
        "training_efficiency": round(rate / ((before[1] + after[1]) / 2), 3),
        "collect_steps_per_s": [round(per_iteration / seconds) for seconds in result.collect_seconds],
        "training_simulation_share": round(result.simulation_share, 3),
    }


def measure(preset: str, args: argparse.Namespace, cores: int) -> dict[str, float | int | str]:
    # Serial: the sampling phases of the run below are rollouts, not the waits of an overlapped loop.
    overrides = {"envs_per_worker": args.envs, "overlap": False}
    if args.rollout_steps is not None:
        overrides["rollout_steps"] = args.rollout_steps
    config = presets.resolve(preset, overrides)
    env_id = config.env_id
    best = dict.fromkeys(("raw", "parallel_raw", "random", "sampler", "pipelined", "lockstep"), 0.0)
    with BatchEnv(env_id, args.envs, envs_per_process=args.envs_per_process) as env:
        learner = Learner(config, vector_size(env.observation_shape), vector_size(env.action_shape))
        policy = learner.initialize().policy
        learner.close()
        rng = np.random.default_rng(0)
        samplers = {
            "sampler": (Sampler, env),
            "pipelined": (StepSampler, env),
            "lockstep": (StepSampler, _Lockstep(env)),
        }
        for _ in range(args.repeats):
            best["raw"] = max(best["raw"], raw_steps_per_s(env_id, args.steps, args.seconds))
            parallel = parallel_raw_steps_per_s(env_id, args.steps // cores, args.seconds, cores)
            best["parallel_raw"] = max(best["parallel_raw"], parallel)
            best["random"] = max(best["random"], batch_steps_per_s(env, args.steps, args.seconds))
            for kind, (sampler_type, grouped) in samplers.items():
                sampler = sampler_type(TrainingEnv(grouped, config), config, rng)  # resets the batch
                best[kind] = max(best[kind], sampler_steps_per_s(sampler, policy, args.seconds))
        processes = env.num_processes
    result: dict[str, float | int | str] = {"env_id": env_id, "rollout_steps": config.rollout_steps}
    result |= {f"{kind}_steps_per_s": round(rate) for kind, rate in best.items()}
    result["batch_steps_per_s"] = result.pop("random_steps_per_s")
    result["processes"] = processes
    for kind in ("random", "lockstep", "pipelined"):
        result[f"{kind}_ratio"] = round(best[kind] / (best["raw"] * cores), 3)
    result["ratio"] = round(best["sampler"] / (best["raw"] * cores), 3)
    result["efficiency"] = round(best["sampler"] / best["parallel_raw"], 3)
    if args.train_iterations:
        result |= training_rates(config, args, cores)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), help="presets whose env and networks to use")
    parser.add_argument("--envs", type=int, default=16, help="environments in the batch")
    parser.add_argument("--envs-per-process", type=int, default=None, help="default: BatchEnv's (one process per CPU)")
    parser.add_argument(
        "--steps", type=int, default=100_000, help="most steps per measurement, all environments together"
    )
    parser.add_argument("--rollout-steps", type=int, default=None, help="default: the preset's")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="most seconds per raw measurement, least per sampler one"
    )
    parser.add_argument("--repeats", type=int, default=2, help="rounds; the best one counts")
    parser.add_argument(
        "--train-iterations", type=int, default=3, help="iterations of the real training run; 0 skips it"
    )
    args = parser.parse_args()
    cores = usable_cpus()
    results = {preset: measure(preset, args, cores) for preset in args.presets}
    print(json.dumps({"cores": cores, "envs": args.envs, "results": results}))


if __name__ == "__main__":
    main()
