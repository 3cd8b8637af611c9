"""Side by side with Stable-Baselines3 PPO on the same environment and budget; prints one JSON line.

Both train for `--steps` environment steps and are then evaluated over `--eval-episodes` episodes of the
deterministic policy on the same time-limited environment (`envs.make.make_env`). SB3 uses the
rl-baselines3-zoo hyperparameters of the task (those FACTS.md measured on the build machine), one torch
thread. Stable-Baselines3 needs torch, which this project does not install: without it the script
prints {"skipped": ...} and exits 0.

    .venv/bin/python benchmarks/sb3_compare.py --task pendulum --steps 100000
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from agents_operator import presets

# rl-baselines3-zoo hyperparameters (hyperparams/ppo.yml); `normalize` means a VecNormalize wrapper.
ZOO = {
    "pendulum": {
        "n_envs": 4,
        "normalize": False,
        "kwargs": {
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
        },
    },
    "inverted_pendulum": {"n_envs": 8, "normalize": True, "kwargs": {}},
    "cheetah": {
        "n_envs": 4,
        "normalize": True,
        "kwargs": {
            "batch_size": 128,
            "n_steps": 512,
            "gamma": 0.99,
            "gae_lambda": 0.92,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "sde_sample_freq": 4,
            "max_grad_norm": 0.5,
            "vf_coef": 0.5,
            "learning_rate": 3e-5,
            "use_sde": True,
            "clip_range": 0.4,
        },
        "policy_kwargs": {"log_std_init": -2, "ortho_init": False, "net_arch": {"pi": [256, 256], "vf": [256, 256]}},
    },
}


def run_sb3(task: str, env_id: str, max_episode_steps: int | None, steps: int, episodes: int, seed: int) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    from agents_operator.trainer.envs.make import make_env

    torch.set_num_threads(1)
    settings = ZOO[task]
    env = make_vec_env(lambda: make_env(env_id, max_episode_steps), n_envs=settings["n_envs"], seed=seed)
    if settings["normalize"]:
        env = VecNormalize(env)
    policy_kwargs = dict(settings.get("policy_kwargs", {}))
    if policy_kwargs:
        policy_kwargs["activation_fn"] = torch.nn.ReLU
    model = PPO("MlpPolicy", env, seed=seed, policy_kwargs=policy_kwargs or None, **settings["kwargs"])
    started = time.monotonic()
    model.learn(total_timesteps=steps)
    wall = time.monotonic() - started
    if settings["normalize"]:
        env.training, env.norm_reward = False, False
    returns, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True)
    return _summary(steps, wall, returns)


def run_ours(task: str, steps: int, episodes: int, seed: int) -> dict:
    from agents_operator.trainer import loop

    # eval_every larger than the number of iterations: one evaluation, at the end.
    settings = {"total_steps": steps, "seed": seed, "eval_episodes": episodes, "eval_every": 1_000_000}
    config = presets.resolve(task, {**settings, "metrics_port": 0})
    with tempfile.TemporaryDirectory() as scratch:
        result = loop.train(config, Path(scratch) / "run")
    final = result.evaluations[-1][1]
    return {"env_steps": result.env_steps, **_summary(result.env_steps, result.wall_seconds, [final])}


def _summary(steps: int, wall: float, returns: list[float]) -> dict:
    mean = sum(returns) / len(returns)
    return {"wall_s": round(wall, 1), "steps_per_s": round(steps / wall), "eval_return": round(mean, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pendulum", choices=sorted(ZOO))
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("stable_baselines3") is None:
        reason = "stable_baselines3 is not importable (it needs torch, which this project does not install)"
        print(json.dumps({"skipped": reason}))
        return 0
    config = presets.resolve(args.task)
    record = {
        "task": args.task,
        "env_id": config.env_id,
        "steps": args.steps,
        "ours": run_ours(args.task, args.steps, args.eval_episodes, args.seed),
        "sb3": run_sb3(args.task, config.env_id, config.max_episode_steps, args.steps, args.eval_episodes, args.seed),
    }
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
