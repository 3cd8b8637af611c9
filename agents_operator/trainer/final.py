"""The chief's last look at a run's final policy: its evaluation and its video, in one pass.

The video is `video_episodes` episodes of the final evaluation itself (episode i seeded `seed` +
`EVALUATION_SEED_OFFSET` + i, as every evaluation's): they are rendered, and their returns count in the
evaluation as they are, while the worker processes play the evaluation's other episodes at the same time
(`BatchEnv.run_episodes`). An episode depends only on its seed (`envs.episodes`), so the evaluation is the
one it would be without a video, and the video costs the rendering of its own episodes, no episode more. A
rendered PyBullet episode is where the time goes (HalfCheetah: about 55 ms a frame against 1-2 ms a step),
which the evaluation's other episodes now overlap.

With env servers, both play on the first server, one after the other: rendered there on a connection of its
own (`playback.source`, as `visualize --env-server`), so that a failed rendering leaves the batch usable. A
failure to render (display libraries a minimal image may lack) is reported, never fatal: the evaluation then
plays the video's episodes too.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path

from agents_operator import topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer import playback, visualize
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import Played
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy


def play(
    config: TrainerConfig,
    policy: NumpyPolicy,
    observations: Normalizer,
    source: BatchEnv | RemoteBatchEnv,
    episodes: int,
    video: Path | None,
    note: Callable[[str], None],
    env_server: str | None = None,
) -> Played:
    """The returns and lengths of the final evaluation's `episodes` episodes on `source`; with `video`, its
    first `video_episodes` are rendered to that file, here or by `env_server` (see the module docstring)."""
    seed = config.seed + topology.EVALUATION_SEED_OFFSET
    rendering = config.video_episodes if video is not None else 0
    rest = max(episodes - rendering, 0)
    if not rendering:
        return source.run_episodes(policy, observations, episodes, seed)
    if env_server is not None:
        rendered = _render(config, policy, observations, video, env_server, note)
        others = source.run_episodes(policy, observations, rest, seed + rendering)
    else:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            playing = pool.submit(source.run_episodes, policy, observations, rest, seed + rendering)
            try:
                rendered = _render(config, policy, observations, video, None, note)
            except BaseException:
                source.kill()  # Ctrl-C: end the episodes in flight rather than wait for them
                raise
            others = playing.result()
    if rendered is None:
        rendered = source.run_episodes(policy, observations, min(rendering, episodes), seed)
    return (rendered[0] + others[0])[:episodes], (rendered[1] + others[1])[:episodes]


def _render(
    config: TrainerConfig,
    policy: NumpyPolicy,
    observations: Normalizer,
    out: Path,
    env_server: str | None,
    note: Callable[[str], None],
) -> Played | None:
    """Render the video's episodes to `out` (here, or by `env_server`); None when that failed."""
    seed = config.seed + topology.EVALUATION_SEED_OFFSET
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        where = playback.source(config.env_id, config.max_episode_steps, env_server, 1, render=True)
        with where, visualize.writing(out, where.render_fps) as on_frame:
            played = where.run_episodes(policy, observations, config.video_episodes, seed, on_frame)
    except Exception as error:  # rendering needs display libraries a minimal image may lack
        note(f"no video: {type(error).__name__}: {error}")
        return None
    note(f"video {out}: return {', '.join(f'{r:.1f}' for r in played[0])}")
    return played
