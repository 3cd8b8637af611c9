"""The end of a run (trainer/final.py): the final video is the final evaluation's first episodes, and a video
that cannot be rendered is only noted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents_operator import topology
from agents_operator.trainer import final, visualize
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(120)


EPISODES = 5


def normalizer(dim: int) -> Normalizer:
    """Observation statistics as a trainer has them mid-run, so that normalising changes the actions."""
    observations = Normalizer((dim,), ROLLOUT_CONFIG.clip_observations)
    observations.shared = Moments(50.0, np.linspace(-10.0, 20.0, dim), np.linspace(60.0, 300.0, dim))
    return observations


@pytest.mark.parametrize("fails", [False, True])
def test_the_final_video_is_the_evaluations_first_episodes(
    fails: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The video renders the final evaluation's first episodes while the workers play the others: the same
    returns, in order, as the evaluation played without a video; a video that cannot be rendered is only
    noted, and the evaluation plays its episodes instead."""
    config = ROLLOUT_CONFIG.model_copy(update={"video_episodes": 2})
    policy, seed = random_policy(config, 3, 1), config.seed + topology.EVALUATION_SEED_OFFSET
    with LocalEpisodes(config.env_id, config.max_episode_steps) as local:
        want = local.run_episodes(policy, normalizer(3), EPISODES, seed)
    if fails:
        monkeypatch.setattr(visualize, "writing", lambda *_: (_ for _ in ()).throw(OSError("no display")))
    notes: list[str] = []
    out = tmp_path / "videos" / "final.gif"
    with BatchEnv(config.env_id, 2, envs_per_process=1, max_episode_steps=config.max_episode_steps) as batch:
        assert final.play(config, policy, normalizer(3), batch, EPISODES, out, notes.append) == want
    if fails:
        assert notes == ["no video: OSError: no display"]
        assert not out.exists()
    else:
        assert notes == [f"video {out}: return {want[0][0]:.1f}, {want[0][1]:.1f}"]
        assert out.read_bytes()[:6] == b"GIF89a"
