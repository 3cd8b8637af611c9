"""What a worker's training loop reports (`Outputs`): after each iteration its summaries, Prometheus metrics,
progress line and the `RunResult` the benchmarks read; the chief's evaluations and their records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from agents_operator import topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.learner import LearnerState
from agents_operator.trainer.metrics import Metrics
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.progress import Progress
from agents_operator.trainer.summaries import SummaryWriter


@dataclass
class RunResult:
    """What a finished `train` call reports (the benchmarks read it)."""

    env_steps: int
    iterations: int
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (env steps, eval mean return)
    train_returns: list[tuple[int, float]] = field(default_factory=list)  # (env steps, train mean return)
    sampling_steps: int = 0
    collect_seconds: list[float] = field(default_factory=list)  # each iteration's sampling phase, in order
    update_seconds: list[float] = field(default_factory=list)  # each iteration's update, in order
    simulation_shares: list[float | None] = field(default_factory=list)  # each sampling phase's `simulation_share`
    evaluation_seconds: float = 0.0  # spent in the evaluations, all together (the final one and its video too)
    evaluated_after: list[float] = field(default_factory=list)  # per evaluation: the run's seconds before it,
    # start-up included, evaluations excluded
    wall_seconds: float = 0.0
    stopped: bool = False  # a worker that left on SIGTERM before the job's end (`leaving.StopRequest`)

    @property
    def sampling_seconds(self) -> float:
        return sum(self.collect_seconds)

    @property
    def simulation_share(self) -> float | None:
        """`simulation_share` over all the sampling phases that were timed, each weighted by its seconds."""
        phases = zip(self.simulation_shares, self.collect_seconds, strict=True)
        timed = [(share, seconds) for share, seconds in phases if share is not None]
        if not timed:
            return None
        return sum(share * seconds for share, seconds in timed) / sum(seconds for _, seconds in timed)


def ps_share(timings: dict[str, float]) -> float:
    """Share of an update spent with the shared variables rather than on the local epochs."""
    shared = timings["ps_seconds"] + timings["finish_seconds"]
    return shared / (shared + timings["epochs_seconds"])


WHERE_MEASURED = {
    "sync_dropped": "sync/dropped_changes",
    "staleness": "async/staleness",
    "turn_wait_seconds": "async/turn_wait_seconds",
}
"""The update's measures that only some layouts take (`Learner.update`), and their summaries' tags."""


class Outputs:
    """Where an iteration is reported: summaries, Prometheus metrics, progress, the `RunResult`; and evaluation."""

    def __init__(
        self,
        config: TrainerConfig,
        logdir: Path,
        stream: TextIO | None,
        episodes: BatchEnv | RemoteBatchEnv,
        chief: bool = True,
        metrics_host: str = "",
    ):
        self.config = config
        self.episodes = episodes  # where evaluations play
        # Only the chief writes summaries and serves metrics; other workers report progress in their logs.
        self.writer = SummaryWriter(logdir) if chief else None
        self.metrics = Metrics(config.metrics_port if chief else 0, metrics_host)
        self.progress = Progress(config.total_steps, stream)
        self.result = RunResult(0, 0)
        self._last: tuple[float, int] | None = None
        self.evaluation_clock: list[float] = []  # per evaluation, time.monotonic() less the evaluations so far

    def iteration(
        self,
        state: LearnerState,
        losses: dict[str, float],
        episode_returns: list[float],
        episode_lengths: list[int],
        steps: int,
        sampling_seconds: float,
        seconds: float,
        simulation: float | None,
    ) -> None:
        mean_return = float(np.mean(episode_returns)) if episode_returns else None
        if mean_return is not None:
            self.result.train_returns.append((state.env_steps, mean_return))
        self.progress.update(state.env_steps, mean_return, steps / seconds)
        if self.writer is None:
            return
        values = {
            "loss/policy": losses["policy_loss"],
            "loss/value": losses["value_loss"],
            "policy/entropy": losses["entropy"],
            "policy/kl": losses["kl"],
            "policy/approx_kl": losses["approx_kl"],
            "policy/clipfrac": losses["clipfrac"],
            "policy/clip_range": losses["clip_range"],
            "policy/entropy_coef": losses["entropy_coef"],
            "policy/kl_beta": state.kl_beta,
            "policy/std": float(np.exp(state.policy.log_std).mean()),
            "optimizer/learning_rate": losses["learning_rate"],
            "optimizer/grad_norm": losses["grad_norm"],
            "optimizer/discarded_updates": losses["discarded_updates"],
            "perf/env_steps_per_second": steps / seconds,
            "perf/sampling_steps_per_second": steps / sampling_seconds,
            "perf/ps_share": ps_share(losses),
        }
        if simulation is not None:
            values["perf/simulation_share"] = simulation
        values.update({tag: losses[name] for name, tag in WHERE_MEASURED.items() if name in losses})
        if mean_return is not None:
            values["train/mean_return"] = mean_return
            values["train/mean_length"] = float(np.mean(episode_lengths))
            self.metrics.mean_return.set(mean_return)
        self.writer.scalars(state.env_steps, values)
        self.writer.flush()
        self.metrics.counters(state.global_step, state.env_steps, state.iterations)
        self.metrics.steps_per_second.set(self._job_rate(state.env_steps, steps / seconds))

    def _job_rate(self, env_steps: int, own_rate: float) -> float:
        """Env steps per second of all workers together: the shared counter's growth since the last
        iteration (this worker's own rate before there is a previous one)."""
        now = time.monotonic()
        last, self._last = self._last, (now, env_steps)
        if last is None or now <= last[0]:
            return own_rate
        return (env_steps - last[1]) / (now - last[0])

    def evaluate(self, state: LearnerState, observations: Normalizer) -> None:
        started = time.monotonic()
        returns, lengths = self.episodes.run_episodes(
            state.policy,
            observations,
            self.config.eval_episodes,
            self.config.seed + topology.EVALUATION_SEED_OFFSET,
        )
        self.result.evaluation_seconds += time.monotonic() - started
        self.record(state, returns, lengths)

    def record(self, state: LearnerState, returns: list[float], lengths: list[int]) -> None:
        """Report an evaluation of the policy of `state`."""
        mean_return = float(np.mean(returns))
        self.writer.scalars(
            state.env_steps, {"eval/mean_return": mean_return, "eval/mean_length": float(np.mean(lengths))}
        )
        self.metrics.eval_return.set(mean_return)
        self.result.evaluations.append((state.env_steps, mean_return))
        self.evaluation_clock.append(time.monotonic() - self.result.evaluation_seconds)
        self.progress.note(f"eval at {state.env_steps} steps: return {mean_return:.1f} +- {np.std(returns):.1f}")

    def close(self) -> None:
        self.progress.close()
        self.metrics.close()
        if self.writer is not None:
            self.writer.close()
