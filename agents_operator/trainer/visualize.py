"""Render the latest policy of a run to a GIF or MP4, headless.

The environment renders with render_mode="rgb_array" (PyBullet's software renderer; pygame surfaces
for the classic-control tasks, no display needed). The policy acts deterministically with the run's
saved normaliser statistics, exactly as in evaluation.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints
from agents_operator.trainer.normalize import Normalizer

FORMATS = (".gif", ".mp4")
_DEFAULT_FPS = 30


class _Gif:
    """Frames kept as 8-bit palette images (a third of the memory of RGB), written at close."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps, self.frames = path, fps, []

    def add(self, frame: np.ndarray) -> None:
        from PIL import Image

        self.frames.append(Image.fromarray(frame).quantize(colors=256))

    def close(self) -> None:
        first, *rest = self.frames
        first.save(self.path, save_all=True, append_images=rest, duration=round(1000 / self.fps), loop=0)


class _Mp4:
    """Frames streamed to the ffmpeg binary that the imageio-ffmpeg wheel ships (H.264)."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps, self.writer = path, fps, None

    def add(self, frame: np.ndarray) -> None:
        if self.writer is None:
            import imageio_ffmpeg

            height, width = frame.shape[:2]
            self.writer = imageio_ffmpeg.write_frames(
                str(self.path), (width, height), fps=self.fps, macro_block_size=2, quality=7
            )
            self.writer.send(None)
        self.writer.send(np.ascontiguousarray(frame))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def render(config: TrainerConfig, logdir: Path, out: Path, episodes: int) -> tuple[list[float], Path]:
    """Write `episodes` episodes of the run's latest policy to `out`; returns their returns and the checkpoint."""
    from agents_operator.trainer.envs import make_env
    from agents_operator.trainer.learner import Learner, vector_size
    from agents_operator.trainer.wrappers import run_episodes

    # pygame (classic-control rendering) draws on plain surfaces; without a display driver set, SDL
    # looks for one and complains on stderr. pygame still imports the deprecated pkg_resources.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    env = make_env(config.env_id, config.max_episode_steps, render_mode="rgb_array")
    learner = Learner(config, vector_size(env.observation_space.shape), vector_size(env.action_space.shape))
    try:
        restored = checkpoints.restore_latest(learner, logdir)
        if restored is None:
            raise FileNotFoundError(f"no checkpoint in {checkpoints.directory(logdir)}")
        state, path = restored
        observations = Normalizer(env.observation_space.shape, config.clip_observations, config.normalize_observations)
        observations.shared = state.observation_moments
        fps = env.metadata.get("render_fps") or _DEFAULT_FPS
        writer = _Gif(out, fps) if out.suffix == ".gif" else _Mp4(out, fps)
        returns, _ = run_episodes(env, state.policy, observations, episodes, config.seed, on_frame=writer.add)
        writer.close()
        return returns, path
    finally:
        learner.close()
        env.close()
