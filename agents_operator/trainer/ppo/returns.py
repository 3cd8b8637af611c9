"""Generalized advantage estimation (Schulman et al. 2016) and value targets, in pure numpy.

All arrays are time-major, shape (T, N): T steps of N environments. Episodes end in two different ways:
`terminated` (a terminal state: its value is zero) and `truncated` (a time limit: the state still has a
value, which we bootstrap from the value of the episode's final observation). In both cases the GAE trace
stops there, because the next row of the rollout belongs to a new episode.
"""

from __future__ import annotations

import numpy as np


def next_values(values: np.ndarray, last_values: np.ndarray, final_values: np.ndarray, done: np.ndarray) -> np.ndarray:
    """V(s_{t+1}) for every step: the next row's value, or the final observation's value where an episode ended.

    `last_values` (N,) are the values of the observations after the last step of the rollout;
    `final_values` (T, N) only matter where `done` (terminated or truncated) is set.
    """
    following = np.concatenate([values[1:], last_values[None]], axis=0)
    return np.where(done, final_values, following)


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    discount: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages A_t and value targets (the lambda-returns A_t + V(s_t)), both (T, N) float32.

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    """
    not_terminal = 1.0 - terminated.astype(np.float32)
    not_done = 1.0 - (terminated | truncated).astype(np.float32)
    deltas = rewards + discount * not_terminal * next_values - values
    advantages = np.zeros_like(deltas, dtype=np.float32)
    running = np.zeros(deltas.shape[1:], dtype=np.float32)
    for t in reversed(range(len(deltas))):
        running = deltas[t] + discount * gae_lambda * not_done[t] * running
        advantages[t] = running
    return advantages, (advantages + values).astype(np.float32)
