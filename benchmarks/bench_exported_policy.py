"""Exported policies: size on disk and time per action, against the trainer's numpy actor in the same run.

For the `pendulum` and `cheetah` presets, a policy with the preset's networks (random weights: size and speed
depend only on the shapes) is exported with `trainer.export.write` and loaded with
`agents_operator.exported.policy.load`.
Per action: the loaded SavedModel (`act` signature, through the loader) against the numpy actor as the trainer
evaluates (`envs.episodes.deterministic` at batch 1, the same mean + clip on a batch of 256), best of several
repeats. Prints one JSON line; ratios > 1 mean the SavedModel is slower. numpy runs single-threaded, as in the
trainer's environment processes.

    PYTHONPATH=. python benchmarks/bench_exported_policy.py
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import tempfile
import timeit
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

from agents_operator import exported, presets  # noqa: E402
from agents_operator.exported import policy as loader  # noqa: E402
from agents_operator.trainer import export  # noqa: E402
from agents_operator.trainer.envs.episodes import deterministic  # noqa: E402
from agents_operator.trainer.envs.make import make_env  # noqa: E402
from agents_operator.trainer.ppo.normalize import Moments, Normalizer  # noqa: E402
from agents_operator.trainer.ppo.policy import NumpyPolicy  # noqa: E402

BATCHES = (1, 256)
REPEATS = 5


def _policy(config, obs_dim: int, act_dim: int) -> tuple[NumpyPolicy, Normalizer]:
    rng = np.random.default_rng(0)

    def layers(sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        pairs = itertools.pairwise(sizes)
        return [(rng.normal(0, 0.3, (a, b)).astype(np.float32), np.zeros(b, np.float32)) for a, b in pairs]

    policy = NumpyPolicy(
        layers([obs_dim, *config.policy_layers, act_dim]),
        np.zeros(act_dim, np.float32),
        layers([obs_dim, *config.value_layers, 1]),
        config.activation,
    )
    observations = Normalizer((obs_dim,), config.clip_observations, config.normalize_observations)
    observations.shared = Moments(100.0, rng.normal(size=obs_dim) * 100, np.full(obs_dim, 300.0))
    return policy, observations


def _numpy_batch(policy: NumpyPolicy, observations: Normalizer, low, high, rows: np.ndarray) -> np.ndarray:
    return np.clip(policy.mean(observations.normalize(rows)), low, high)


def _seconds_per_call(call, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=REPEATS)) / number


def measure(preset: str, directory: Path) -> dict[str, float]:
    config = presets.resolve(preset)
    env = make_env(config.env_id)
    low, high = env.action_space.low, env.action_space.high
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    policy, observations = _policy(config, obs_dim, act_dim)
    metadata = exported.Metadata(
        env_id=config.env_id,
        max_episode_steps=None,
        observation_shape=[obs_dim],
        action_shape=[act_dim],
        action_low=low.tolist(),
        action_high=high.tolist(),
        preset=preset,
        checkpoint="ckpt-00000000",
        global_step=0,
        env_steps=0,
        evaluation=None,
    )
    out = export.write(directory / preset, policy, observations, low, high, metadata)
    loaded = loader.load(out)
    trainer = deterministic(policy, observations, low, high)
    x = np.random.default_rng(1).normal(size=(max(BATCHES), obs_dim)).astype(np.float32)
    result = {f"{preset}_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}
    for batch in BATCHES:
        if batch == 1:  # one observation, as the trainer's evaluation acts
            numpy_call, saved_call = functools.partial(trainer, x[0]), functools.partial(loaded, x[0])
        else:  # the same mean and clip on a batch
            numpy_call = functools.partial(_numpy_batch, policy, observations, low, high, x[:batch])
            saved_call = functools.partial(loaded, x[:batch])
        number = 2000 if batch == 1 else 50
        numpy_us = _seconds_per_call(numpy_call, number) / batch * 1e6
        saved_us = _seconds_per_call(saved_call, number) / batch * 1e6
        result[f"{preset}_b{batch}_numpy_us_per_action"] = round(numpy_us, 2)
        result[f"{preset}_b{batch}_savedmodel_us_per_action"] = round(saved_us, 2)
        result[f"{preset}_b{batch}_savedmodel_over_numpy"] = round(saved_us / numpy_us, 2)
    return result


def main() -> None:
    result: dict[str, float] = {"cpus": len(os.sched_getaffinity(0))}
    with tempfile.TemporaryDirectory() as directory:
        for preset in ("pendulum", "cheetah"):
            result.update(measure(preset, Path(directory)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
