"""Where the environments live: colocated, an env server per step, an env server per rollout; one JSON line.

For each environment it runs the trainer's own sampling phase (`samplers.Sampler`, `StepSampler` per step or
`RolloutSampler` in rollout mode: numpy policy of the task's preset, normalisation, GAE) over the same batch
of environments in three placements:
- colocated: a `BatchEnv` in the trainer's process tree, as today;
- per_step: `agents-operator env-server` in its own process on loopback (what a sidecar or a remote pod
  is, without the network), one gRPC round trip per batched step;
- rollout: the same server, one round trip per rollout (the server runs the policy).
Per placement: steps_per_s (all environments together, best of `--repeats` alternating rollouts),
step_ms (wall time of one batched step within a rollout, acting included), and for the two placements
that step one call at a time, round_trip_ms (median of the `step` call alone); ratio = steps_per_s against
colocated.

With `--train STEPS` it also trains each preset for STEPS environment steps in each placement (`loop.train`
with the preset's own batch, `env_servers` pointing at one server seeded as the colocated batch), and
reports under "training" the wall-clock env steps per second, its ratio to colocated, and the final
evaluation return (the same seed everywhere: step mode matches colocated but for rounding, exactly where the
colocated batch runs in one process).

    .venv/bin/python benchmarks/bench_env_placement.py --envs 8 --rollout-steps 256
    .venv/bin/python benchmarks/bench_env_placement.py --presets pendulum --train 40000
"""

from __future__ import annotations

import os

# Like the environment workers, this process must not spread numpy over threads the workers need.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from agents_operator import presets, tfconfig  # noqa: E402
from agents_operator.config import TrainerConfig  # noqa: E402
from agents_operator.trainer.envs.batch import BatchEnv  # noqa: E402
from agents_operator.trainer.envserver.client import RemoteBatchEnv  # noqa: E402
from agents_operator.trainer.loop import train  # noqa: E402
from agents_operator.trainer.ppo.policy import NumpyPolicy  # noqa: E402
from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler, StepSampler  # noqa: E402
from agents_operator.trainer.sampling.training_env import TrainingEnv  # noqa: E402

PRESETS = ("pendulum", "cheetah")  # Pendulum-v1 and HalfCheetahBulletEnv-v0


def random_policy(config: TrainerConfig, obs_dim: int, act_dim: int) -> NumpyPolicy:
    """The preset's network sizes with random weights: acting costs what it costs in training."""
    rng = np.random.default_rng(0)

    def layers(sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.normal(0, 1 / np.sqrt(m), (m, n)).astype(np.float32), np.zeros(n, np.float32))
            for m, n in itertools.pairwise(sizes)
        ]

    policy = layers([obs_dim, *config.policy_layers, act_dim])
    value = layers([obs_dim, *config.value_layers, 1])
    return NumpyPolicy(policy, np.full(act_dim, config.init_log_std, np.float32), value, config.activation)


@contextlib.contextmanager
def env_server(config: TrainerConfig) -> Iterator[str]:
    """`agents-operator env-server` for `config`'s batch, in its own process; yields its address."""
    command = [sys.executable, "-m", "agents_operator.cli", "env-server", "--env", config.env_id, "--port", "0"]
    command += ["--envs", str(config.envs_per_worker), "--seed", str(config.seed)]
    if config.envs_per_process:
        command += ["--envs-per-process", str(config.envs_per_process)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(process.stdout.readline().rsplit(" ", 1)[1])
        yield f"localhost:{port}"
    finally:
        process.terminate()
        process.wait(30)


def round_trip_ms(env: BatchEnv | RemoteBatchEnv, calls: int = 200) -> float:
    actions = np.zeros((env.num_envs, *env.action_shape), np.float32)
    times = []
    for _ in range(calls):
        begin = time.perf_counter()
        env.step(actions)
        times.append(time.perf_counter() - begin)
    return 1e3 * float(np.median(times))


def measure(preset: str, args: argparse.Namespace) -> dict[str, object]:
    config = presets.resolve(
        preset, {"envs_per_worker": args.envs, "rollout_steps": args.rollout_steps, "minibatches": 1}
    )
    with contextlib.ExitStack() as stack:
        colocated = stack.enter_context(
            BatchEnv(config.env_id, config.envs_per_worker, envs_per_process=config.envs_per_process)
        )
        remote = stack.enter_context(RemoteBatchEnv([stack.enter_context(env_server(config))]))
        policy = random_policy(config, colocated.observation_shape[0], colocated.action_shape[0])
        rng = np.random.default_rng(0)
        samplers = {
            "colocated": Sampler(TrainingEnv(colocated, config), config, rng),
            "per_step": StepSampler(TrainingEnv(remote, config), config, rng),
            "rollout": RolloutSampler(TrainingEnv(remote, config), config, rng),
        }
        best = dict.fromkeys(samplers, float("inf"))
        for _ in range(args.repeats):
            for name, sampler in samplers.items():
                begin = time.perf_counter()
                sampler.collect(policy)
                best[name] = min(best[name], time.perf_counter() - begin)
        round_trips = {"colocated": round_trip_ms(colocated), "per_step": round_trip_ms(remote)}
    steps = config.envs_per_worker * config.rollout_steps
    results: dict[str, object] = {"env_id": config.env_id}
    for name, seconds in best.items():
        results[name] = {
            "steps_per_s": round(steps / seconds),
            "step_ms": round(1e3 * seconds / config.rollout_steps, 3),
            "ratio": round(best["colocated"] / seconds, 3),
        }
        if name in round_trips:
            results[name]["round_trip_ms"] = round(round_trips[name], 3)
    return results


def measure_training(preset: str, steps: int) -> dict[str, object]:
    """Whole training runs of `steps` env steps: colocated, per step through a server, rollout mode."""
    config = presets.resolve(preset, {"total_steps": steps, "video_episodes": 0, "metrics_port": 0})
    results: dict[str, dict[str, float]] = {}
    for name, mode in (("colocated", None), ("per_step", "step"), ("rollout", "rollout")):
        with contextlib.ExitStack() as stack:
            servers = None
            if mode is not None:
                servers = tfconfig.EnvServers((stack.enter_context(env_server(config)),), mode)
            logdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            begin = time.perf_counter()
            run = train(config, logdir, env_servers=servers)
            seconds = time.perf_counter() - begin
        results[name] = {
            "steps_per_s": round(run.env_steps / seconds),
            "final_eval": round(run.evaluations[-1][1], 1) if run.evaluations else None,
        }
    for entry in results.values():
        entry["ratio"] = round(entry["steps_per_s"] / results["colocated"]["steps_per_s"], 3)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), help="tasks (their networks and envs)")
    parser.add_argument("--envs", type=int, default=8, help="environments in the batch, the same in every placement")
    parser.add_argument("--rollout-steps", type=int, default=256, help="steps per environment and rollout")
    parser.add_argument("--repeats", type=int, default=3, help="rollouts per placement; the fastest counts")
    parser.add_argument("--train", type=int, default=0, metavar="STEPS", help="also train for STEPS env steps")
    args = parser.parse_args()
    results = {preset: measure(preset, args) for preset in args.presets}
    line: dict[str, object] = {"envs": args.envs, "rollout_steps": args.rollout_steps, "results": results}
    if args.train:
        line["training"] = {preset: measure_training(preset, args.train) for preset in args.presets}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
