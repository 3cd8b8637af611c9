"""A short real training run learns: far better than a random policy on a fast PyBullet task."""

import numpy as np

from agents_operator import presets
from agents_operator.trainer import loop
from agents_operator.trainer.envs.make import make_env


def _random_policy_return(env_id, episodes=10):
    env = make_env(env_id)
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = rng.uniform(env.action_space.low, env.action_space.high)
            _, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def test_inverted_pendulum_learns_in_20k_steps(tmp_path):
    # A constant step size: annealed to zero over only 20k steps, the last iterations would barely move.
    settings = {"total_steps": 20_480, "lr_schedule": "constant", "eval_every": 1000, "eval_episodes": 3}
    settings["metrics_port"] = 0
    config = presets.resolve("inverted_pendulum", settings)
    result = loop.train(config, tmp_path / "run")
    random_return = _random_policy_return(config.env_id)
    (steps, trained_return), *_ = result.evaluations
    assert steps == 20_480
    assert random_return < 100
    assert trained_return > 500, (trained_return, random_return)
