"""The evaluator replica: scores every new checkpoint of the chief with the deterministic policy.

It reads the run directory the chief writes (a shared volume in a cluster), so evaluation costs the workers
nothing: each new checkpoint is restored into a local learner and played for `eval_episodes` episodes, spread
over worker processes (`BatchEnv.run_episodes`, one per usable CPU); the returns go to the `evaluator/`
summaries next to the chief's. It runs until it is stopped (the operator and the local launcher stop it when
the job ends) or until it has scored a checkpoint that reached `total_steps`. With env servers, the episodes
are played by the first of them (it renders nothing, so the evaluator needs no simulator).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agents_operator import topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envserver import client
from agents_operator.trainer.learner import Learner, vector_size
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.summaries import SummaryWriter

if TYPE_CHECKING:
    from agents_operator.tfconfig import EnvServers

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0


def run(
    config: TrainerConfig, logdir: Path, poll_seconds: float = POLL_SECONDS, env_servers: EnvServers | None = None
) -> int:
    logdir = Path(logdir)
    if env_servers is None:
        episodes = BatchEnv.for_episodes(config.env_id, config.max_episode_steps, config.eval_episodes)
    else:
        episodes = client.connect(list(env_servers.addresses), config.env_id)
    learner = Learner(config, vector_size(episodes.observation_shape), vector_size(episodes.action_shape))
    writer = SummaryWriter(logdir / "evaluator")
    seen: Path | None = None
    try:
        log.info("evaluator: watching %s", checkpoints.directory(logdir))
        while True:
            found = checkpoints.list_checkpoints(logdir)
            if found and found[-1] != seen:
                seen = found[-1]
                try:
                    state, scored = checkpoints.restore_latest(learner, logdir)
                except checkpoints.CheckpointError as error:
                    log.warning("no checkpoint can be restored (%s)", error)
                    continue
                observations = Normalizer(
                    episodes.observation_shape, config.clip_observations, config.normalize_observations
                )
                observations.shared = state.observation_moments
                returns, lengths = episodes.run_episodes(
                    state.policy, observations, config.eval_episodes, config.seed + topology.EVALUATOR_SEED_OFFSET
                )
                mean_return = float(np.mean(returns))
                values = {"eval/mean_return": mean_return, "eval/mean_length": float(np.mean(lengths))}
                writer.scalars(state.env_steps, values)
                writer.flush()
                log.info(
                    "evaluator: %s at %d env steps: return %.1f +- %.1f",
                    scored.name,
                    state.env_steps,
                    mean_return,
                    float(np.std(returns)),
                )
                if state.env_steps >= config.total_steps:
                    return 0
            time.sleep(poll_seconds)
    finally:
        writer.close()
        learner.close()
        episodes.close()
