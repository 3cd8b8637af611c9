"""The Stable-Baselines3 side of `bench_sb3_compare.py`: trains one PPO setting, evaluates it, prints one JSON line.

Runs only in the separate venv that `bench_sb3_compare.py` sets up (torch and stable-baselines3 are no dependency of
this project), with the project root on PYTHONPATH: the environments are made by the trainer's own `make_env`
(same ids, float32 observations, time limit) and the evaluation is the trainer's own `episodes.play`, so both
sides are scored the same way. It reads the setting as one JSON object on standard input (what
`bench_sb3_compare.identical` and `bench_sb3_compare.zoo` return) and prints {"env_steps", "wall_s", "sampling_s",
"update_s", "evaluation_s", "eval_returns", "evaluations", "versions", "torch_threads"}. `wall_s` runs from
making the environments to the end of `learn`, evaluations during training excluded; `sampling_s` is the time
inside rollout collection (GAE included, as in the trainer's sampling phase), `update_s` the time between
rollouts (the gradient steps). With "evaluate_every" (env steps) in the setting, the policy is also evaluated
during training, at the end of the first rollout past each multiple: `evaluations` lists [env steps, mean
return, training seconds before it] (each also printed to standard error as it is taken), and with "target"
training stops at the first mean return at or above it.

    PYTHONPATH=. benchmarks/.venv-sb3/bin/python benchmarks/sb3_runner.py < setting.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv, VecNormalize

from agents_operator.trainer.envs.episodes import play
from agents_operator.trainer.envs.make import make_env

ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


class PhaseTimer(BaseCallback):
    """Seconds spent collecting rollouts, and between them (the updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.sampling = self.update = 0.0
        self._mark: float | None = None  # when the current phase began

    def _lap(self) -> float:
        now = time.monotonic()
        lap, self._mark = (0.0 if self._mark is None else now - self._mark), now
        return lap

    def _on_rollout_start(self) -> None:
        self.update += self._lap()

    def _on_rollout_end(self) -> None:
        self.sampling += self._lap()

    def _on_training_end(self) -> None:
        self.update += self._lap()

    def skip(self, seconds: float) -> None:
        """Leave out `seconds` just spent on something else (an evaluation) from the phase under way."""
        if self._mark is not None:
            self._mark += seconds

    def _on_step(self) -> bool:
        return True


class Evaluations(BaseCallback):
    """Evaluates the policy every `every` env steps (at the end of a rollout), stops at `target`; the time spent
    evaluating is kept apart, so that `seconds` is training time only."""

    def __init__(self, spec: dict, started: float, timer: PhaseTimer) -> None:
        super().__init__()
        self.spec, self.started, self.timer = spec, started, timer
        self.every, self.target = spec.get("evaluate_every"), spec.get("target")
        self.found: list[list[float]] = []
        self.seconds = 0.0  # spent evaluating
        self._reached = False

    def _on_rollout_end(self) -> None:
        if not self.every or self.num_timesteps < self.every * (len(self.found) + 1):
            return
        begin = time.monotonic()
        mean = float(np.mean(evaluate(self.model, self.spec)))
        self.found.append([self.num_timesteps, mean, begin - self.started - self.seconds])
        print(json.dumps({"evaluation": self.found[-1]}), file=sys.stderr, flush=True)  # progress of long runs
        spent = time.monotonic() - begin
        self.seconds += spent
        self.timer.skip(spent)
        self._reached = self.target is not None and mean >= self.target

    def _on_step(self) -> bool:
        return not self._reached


class EntropySchedule(BaseCallback):
    """The setting's "entropy_schedule" (SB3's `ent_coef` is a constant): after each rollout, before its
    update, the bonus's weight as `annealed` has it, by the progress SB3 is about to count."""

    def __init__(self, spec: dict) -> None:
        super().__init__()
        self.weight = annealed(spec["ppo"]["ent_coef"], spec.get("entropy_schedule"), spec)
        self.steps = spec["steps"]

    def _on_rollout_end(self) -> None:
        if callable(self.weight):
            self.model.ent_coef = self.weight(1.0 - self.num_timesteps / self.steps)

    def _on_step(self) -> bool:
        return True


def annealed(value: float, schedule: str | None, spec: dict, floor: float = 0.0) -> float | Callable[[float], float]:
    """`value` under `schedule` (None or "constant": as it is). "linear" anneals it as the trainer's schedules
    (lr, clip, entropy) do: to zero over `steps`, by the env steps counted before each rollout (SB3's progress
    already counts the rollout just collected, hence `ahead`), never below `floor`. "sb3_linear" is SB3's own
    (the zoo's `lin_<value>`), by that progress."""
    if schedule in (None, "constant"):
        return value
    if schedule == "sb3_linear":
        return lambda remaining: value * remaining
    ahead = spec["n_envs"] * spec["ppo"]["n_steps"] / spec["steps"]
    return lambda remaining: max(floor, value * (remaining + ahead))


def build(spec: dict) -> PPO:
    env: VecEnv = make_vec_env(
        make_env,
        n_envs=spec["n_envs"],
        seed=spec["seed"],
        vec_env_cls=SubprocVecEnv,
        env_kwargs={"env_id": spec["env_id"], "max_episode_steps": spec["max_episode_steps"]},
    )
    if spec["normalize"] is not None:
        env = VecNormalize(env, **spec["normalize"])
    policy = dict(spec["policy"])
    if "activation" in policy:
        policy["activation_fn"] = ACTIVATIONS[policy.pop("activation")]
    ppo = {
        **spec["ppo"],
        "learning_rate": annealed(spec["ppo"]["learning_rate"], spec["lr_schedule"], spec),
        "clip_range": annealed(
            spec["ppo"]["clip_range"], spec.get("clip_schedule"), spec, spec.get("clip_range_floor", 0.0)
        ),
    }
    return PPO("MlpPolicy", env, seed=spec["seed"], device="cpu", policy_kwargs=policy, verbose=0, **ppo)


def evaluate(model: PPO, spec: dict) -> list[float]:
    """Returns of the deterministic policy, played by the trainer's `play` on an environment of its `make_env`."""
    env = model.get_env()
    normalize = env.normalize_obs if isinstance(env, VecNormalize) else np.asarray
    evaluation = spec["evaluation"]
    with make_env(spec["env_id"], spec["max_episode_steps"]) as single:
        returns, _ = play(
            single,
            lambda obs: model.predict(normalize(obs), deterministic=True)[0],  # clipped to the action bounds
            evaluation["episodes"],
            evaluation["seed"],
        )
    return returns


def run(spec: dict) -> dict:
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    started = time.monotonic()
    model = build(spec)
    timer = PhaseTimer()
    evaluations = Evaluations(spec, started, timer)
    model.learn(total_timesteps=spec["steps"], callback=[timer, EntropySchedule(spec), evaluations])
    wall = time.monotonic() - started - evaluations.seconds
    returns = evaluate(model, spec)
    evaluated = time.monotonic() - started - wall
    model.get_env().close()
    return {
        "env_steps": model.num_timesteps,
        "wall_s": wall,
        "sampling_s": timer.sampling,
        "update_s": timer.update,
        "evaluation_s": evaluated,
        "eval_returns": returns,
        "evaluations": evaluations.found,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__},
        "torch_threads": torch.get_num_threads(),
    }


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    argparse.ArgumentParser(description=__doc__, formatter_class=formatter).parse_args()
    print(json.dumps(run(json.load(sys.stdin))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
