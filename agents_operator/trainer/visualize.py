"""Render the latest policy of a run to a GIF or MP4, headless.

The environment renders with render_mode="rgb_array" (PyBullet's software renderer; pygame surfaces
for the classic-control tasks, no display needed). The policy acts deterministically with the run's
saved normaliser statistics, exactly as in evaluation. The episodes are played here, or by an env server
(`RemoteBatchEnv.run_episodes`), which sends their frames back: only where the frames come from differs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints
from agents_operator.trainer.envs import remote
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.learner import Learner, vector_size
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


def render(
    config: TrainerConfig, logdir: Path, out: Path, episodes: int, env_server: str | None = None
) -> tuple[list[float], Path]:
    """Write `episodes` episodes of the run's latest policy to `out`, played here or by the env server at
    `env_server` (HOST:PORT); returns their returns and the checkpoint."""
    if env_server is None:
        source = LocalEpisodes(config.env_id, config.max_episode_steps, render=True)
    else:
        source = remote.connect([env_server], config.env_id)
    with source:
        learner = Learner(config, vector_size(source.observation_shape), vector_size(source.action_shape))
        try:
            restored = checkpoints.restore_latest(learner, logdir)
            if restored is None:
                raise FileNotFoundError(f"no checkpoint in {checkpoints.directory(logdir)}")
            state, path = restored
            observations = Normalizer(source.observation_shape, config.clip_observations, config.normalize_observations)
            observations.shared = state.observation_moments
            fps = source.render_fps or _DEFAULT_FPS
            writer = _Gif(out, fps) if out.suffix == ".gif" else _Mp4(out, fps)
            returns, _ = source.run_episodes(state.policy, observations, episodes, config.seed, on_frame=writer.add)
            writer.close()
            return returns, path
        finally:
            learner.close()
