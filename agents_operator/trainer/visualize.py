"""Render the latest policy of a run, or an exported policy, to a GIF or MP4, headless.

The environment renders with render_mode="rgb_array" (PyBullet's software renderer; pygame surfaces
for the classic-control tasks, no display needed). The policy acts deterministically with the run's
saved normaliser statistics, exactly as in evaluation. The episodes are played here, or by an env server
(`RemoteBatchEnv.run_episodes`), which sends their frames back: only where the frames come from differs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer import playback

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
) -> tuple[list[float], str]:
    """Write `episodes` episodes of the run's latest policy to `out`, played here or by the env server at
    `env_server` (HOST:PORT); returns their returns and the checkpoint's name."""
    with playback.of_run(config, logdir, env_server, episodes, render=True) as player:
        return record(player, out, episodes, config.seed), player.name


def render_model(directory: Path, out: Path, episodes: int, env_server: str | None = None) -> list[float]:
    """`render` for an exported policy, from the first seed of its recorded evaluation."""
    with playback.of_model(directory, env_server, episodes, render=True) as player:
        return record(player, out, episodes, player.seed)


def record(player: playback.Player, out: Path, episodes: int, seed: int) -> list[float]:
    """Write the frames of `episodes` episodes of `player` (episode i seeded `seed` + i) to `out`."""
    with writing(out, player.source.render_fps) as on_frame:
        returns, _ = player.play(episodes, seed, on_frame)
    return returns


@contextlib.contextmanager
def writing(out: Path, fps: float | None) -> Iterator[Callable[[np.ndarray], None]]:
    """A function that adds a frame to the GIF or MP4 `out`, written once the block ends without an error."""
    writer = (_Gif if out.suffix == ".gif" else _Mp4)(out, fps or _DEFAULT_FPS)
    yield writer.add
    writer.close()
