"""One worker's training loop: PPO iterations (`iteration.iterate`: sample, advantages, update, adapt) and
their outputs.

After each iteration: summaries, metrics, progress, and every
`eval_every` / `checkpoint_every` iterations an evaluation / a checkpoint. Training stops once the
shared env-step counter reaches `total_steps`; a final checkpoint closes the run, then the chief evaluates the
final policy and renders its video in one pass (`final`), and exports it (`export`) with that evaluation.
With config `overlap` the next rollout runs while the update does (`iteration.iterate_overlapped`,
`sampling.overlapped`; not for async workers in a cluster, `ASYNC_SERIAL`); evaluations wait for it first, and
a lost ps or the run's end drops it.

The environments are the worker's own subprocesses (`BatchEnv`) or, with `env_servers`, those of env
servers (`RemoteBatchEnv`, sampled per step or per rollout). The chief's evaluations play on them too: spread
over the worker subprocesses, or on the first env server, which also renders the final video, so that the
trainer needs no simulator.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from agents_operator import exported, topology
from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer import checkpoints, distributed, export, final, leaving, rundir
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.rollout import simulation_share
from agents_operator.trainer.envserver import client
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.export import Episodes
from agents_operator.trainer.iteration import iterate, iterate_overlapped
from agents_operator.trainer.learner import Learner, LearnerState, vector_size
from agents_operator.trainer.outputs import Outputs, RunResult
from agents_operator.trainer.progress import Progress
from agents_operator.trainer.sampling import samplers
from agents_operator.trainer.sampling.overlapped import OverlappedSampler
from agents_operator.trainer.sampling.training_env import TrainingEnv

ASYNC_SERIAL = (
    "overlap is off: async workers sample, then update (an overlapped rollout would act with weights several "
    "workers' pushes old, and async hopper jobs that overlapped stood still: docs/trainer.md)"
)


def train(
    config: TrainerConfig,
    logdir: Path,
    stream: TextIO | None = None,
    cluster: distributed.Cluster | None = None,
    env_servers: EnvServers | None = None,
    metrics_host: str = "",
    preset: str | None = None,
) -> RunResult:
    """Train (or continue training) in `logdir` until `total_steps`; see the module docstring.

    With a `cluster` this process is one worker of a parameter-server job: the shared variables live on
    the ps tasks, and only the chief writes config.yaml, checkpoints, summaries, evaluations and metrics.
    With `env_servers` the environments are theirs (see the module docstring). The chief's /metrics
    listens on `metrics_host`, or on every interface when it is empty. `preset` (the one the run was
    started from, when known) is recorded in the run directory for its export.
    """
    started = time.monotonic()
    logdir = Path(logdir)
    chief = topology.runs_as_chief(cluster.tf_config if cluster else None)
    if chief:
        rundir.write_config(logdir, config)
        if preset is not None:
            rundir.write_preset(logdir, preset)
    with contextlib.ExitStack() as stack:
        run = _Run.open(stack, config, logdir, stream, cluster, env_servers, metrics_host, chief)
        stop = stack.enter_context(leaving.StopRequest.on_sigterm(cluster))
        state = run.begin()
        while not _finished(state, config) and not stop.requested:
            state = run.iteration(state)
        if stop.requested:
            run.outputs.progress.note(f"SIGTERM: leaving the job after iteration {state.iterations}")
        state = run.end(state)
    result = run.outputs.result
    result.stopped = stop.requested
    result.env_steps, result.iterations = state.env_steps, state.iterations
    result.wall_seconds = time.monotonic() - started
    result.evaluated_after = [clock - started for clock in run.outputs.evaluation_clock]
    return result


@dataclass
class _Run:
    """One worker's run, opened: its environments, learner and outputs, and the steps of `train`."""

    config: TrainerConfig
    logdir: Path
    cluster: distributed.Cluster | None
    env_servers: EnvServers | None
    chief: bool
    learner: Learner
    env: TrainingEnv
    episodes: BatchEnv | RemoteBatchEnv
    """Where the chief's evaluations play: the batch's worker processes, or its first env server."""
    outputs: Outputs
    sampler: samplers.Sampler | samplers.RolloutSampler | OverlappedSampler | None = None
    rng: np.random.Generator | None = None

    @classmethod
    def open(
        cls,
        stack: contextlib.ExitStack,
        config: TrainerConfig,
        logdir: Path,
        stream: TextIO | None,
        cluster: distributed.Cluster | None,
        env_servers: EnvServers | None,
        metrics_host: str,
        chief: bool,
    ) -> _Run:
        """Start the environments, connect to the cluster (waiting for its ps tasks) and build the learner;
        `stack` closes them all."""
        worker = cluster.tf_config.task_index if cluster else 0
        batch_env = stack.enter_context(_batch_env(config, worker, env_servers))
        target = ""
        if cluster is not None:
            for name, address in cluster.peers():
                distributed.wait_for(name, address)
            target = distributed.start_server(cluster.tf_config, config.threads).target
        obs_dim, act_dim = vector_size(batch_env.observation_shape), vector_size(batch_env.action_shape)
        learner = Learner(config, obs_dim, act_dim, cluster, target)
        stack.callback(learner.close)
        outputs = Outputs(config, logdir, stream, batch_env, chief, metrics_host)
        stack.callback(outputs.close)
        env = TrainingEnv(batch_env, config)
        return cls(config, logdir, cluster, env_servers, chief, learner, env, batch_env, outputs)

    def restore(self) -> LearnerState:
        """The run's state from its latest checkpoint, or a fresh one."""
        restored = checkpoints.restore_latest(self.learner, self.logdir)
        if restored:
            self.outputs.progress.note(f"resumed from {restored[1]} at {restored[0].env_steps} env steps")
            return restored[0]
        return self.learner.initialize()

    def begin(self) -> LearnerState:
        """The state to train from (restored, or joined from the cluster's live variables), and the sampler."""
        if self.cluster is None:
            state = self.restore()
        else:
            self._join()
            state = self.learner.state()
        _share_statistics(self.env, state)
        self.outputs.metrics.counters(state.global_step, state.env_steps, state.iterations)
        worker = self.cluster.tf_config.task_index if self.cluster else 0
        self.rng = np.random.default_rng([self.config.seed, worker, state.iterations])
        self.sampler = samplers.for_placement(self.env, self.config, self.rng, self.env_servers)
        if self.config.overlap and self.learner.anchored:
            self.outputs.progress.note(ASYNC_SERIAL)
        elif self.config.overlap:
            self.sampler = OverlappedSampler(self.sampler, self.config)
        return state

    def _join(self) -> None:
        """Join the cluster's shared state. A worker that waits for the chief to initialise it polls the ps tasks:
        one lost meanwhile is waited for and joined again, as in training (`_reconnect`), not a crash."""
        join = self.learner.join
        while True:
            try:
                return join(self.restore)
            except distributed.LOST_CONNECTION as error:
                note = f"lost a parameter server while joining ({distributed.first_line(error)}); reconnecting"
                self.outputs.progress.note(note)
                join = self.learner.reconnect

    def _reconnect(self, error: Exception) -> LearnerState:
        """After a lost ps: reconnect (the chief restoring its latest checkpoint) and return the live state."""
        if self.cluster is None:
            raise error
        self.outputs.progress.note(f"lost a parameter server ({distributed.first_line(error)}); reconnecting")
        self.sampler.discard()
        self.learner.reconnect(self.restore)
        state = self.learner.state()
        _share_statistics(self.env, state)
        return state

    def iteration(self, state: LearnerState) -> LearnerState:
        """One PPO iteration (`iteration.iterate`) and its outputs; after a lost ps, reconnect and return the live
        state."""
        config, result = self.config, self.outputs.result
        begin = time.monotonic()
        step = iterate_overlapped if isinstance(self.sampler, OverlappedSampler) else iterate
        try:
            done = step(state, self.sampler, self.learner, config, self.rng)
        except distributed.LOST_CONNECTION as error:
            return self._reconnect(error)
        before, state = state.iterations, done.state
        _share_statistics(self.env, state)
        result.sampling_steps += done.steps
        result.collect_seconds.append(done.sampling_seconds)
        result.update_seconds.append(done.update_seconds)
        result.simulation_shares.append(simulation_share(self.sampler.simulation_seconds, done.sampling_seconds))
        finished = _finished(state, config)
        if self.chief and _due(before, state.iterations, config.eval_every) and not finished:
            self.sampler.settle()  # the evaluation plays on the environments' processes or servers
            self.outputs.evaluate(state, self.env.observations)
        if self.chief and (_due(before, state.iterations, config.checkpoint_every) or finished):
            try:  # the checkpoint reads every variable from the ps: it may be lost meanwhile too
                saved = checkpoints.save(self.learner, self.logdir, state.iterations)
            except distributed.LOST_CONNECTION as error:
                return self._reconnect(error)
            self.outputs.progress.note(f"checkpoint {saved}")
        self.outputs.iteration(
            state,
            done.metrics,
            done.episode_returns,
            done.episode_lengths,
            steps=done.steps,
            sampling_seconds=done.sampling_seconds,
            seconds=time.monotonic() - begin,
            simulation=result.simulation_shares[-1],
        )
        return state

    def end(self, state: LearnerState) -> LearnerState:
        """Leave the cluster; the chief evaluates the final policy and renders its video, and writes the summary
        and the export."""
        config, progress = self.config, self.outputs.progress
        self.sampler.discard()
        if self.cluster is not None:
            state = leaving.leave_cluster(self.cluster, self.learner, self.logdir, progress)
        if not self.chief:
            return state
        evaluated = self.final_pass(state)
        self.outputs.metrics.counters(state.global_step, state.env_steps, state.iterations)
        rundir.write_summary(self.logdir, _summary(state, self.outputs.result))
        if config.export:
            _export(config, self.logdir, state, self.episodes, progress, evaluated)
        return state

    def final_pass(self, state: LearnerState) -> exported.Evaluation | None:
        """The final policy's evaluation (recorded as every evaluation, when there are any) and its video
        (`final.play`); the evaluation, for the export."""
        config = self.config
        episodes = config.eval_episodes if config.eval_every or config.export else 0
        video = self.logdir / rundir.VIDEO if config.video_episodes else None
        if not episodes and video is None:
            return None
        observations = export.acting_observations(config, state, self.episodes.observation_shape)
        server = self.env_servers.addresses[0] if self.env_servers else None
        note = self.outputs.progress.note
        started = time.monotonic()
        returns, lengths = final.play(config, state.policy, observations, self.episodes, episodes, video, note, server)
        self.outputs.result.evaluation_seconds += time.monotonic() - started
        if not episodes:
            return None
        if config.eval_every:
            self.outputs.record(state, returns, lengths)
        return export.evaluation(returns, config.seed + topology.EVALUATION_SEED_OFFSET)


def _batch_env(config: TrainerConfig, worker: int, env_servers: EnvServers | None) -> BatchEnv | RemoteBatchEnv:
    """The worker's environments: its own subprocesses, or those of its env servers (seeded by whoever
    started them: the operator, with the seeds these would have had)."""
    if env_servers is None:
        return BatchEnv(
            config.env_id,
            config.envs_per_worker,
            envs_per_process=config.envs_per_process,
            seed=topology.first_env_seed(config, worker),
            max_episode_steps=config.max_episode_steps,
        )
    env = client.connect(list(env_servers.addresses), config.env_id)
    if env.num_envs != config.envs_per_worker:
        env.close()
        raise ValueError(
            f"env servers {', '.join(env_servers.addresses)} serve {env.num_envs} environments in all, "
            f"envs_per_worker is {config.envs_per_worker}"
        )
    return env


def _due(before: int, after: int, every: int) -> bool:
    """Whether the shared iteration counter passed a multiple of `every` (0: never) since the chief's last
    iteration. Async workers move it too, so the chief may never land on a multiple itself."""
    return every > 0 and after // every > before // every


def _finished(state: LearnerState, config: TrainerConfig) -> bool:
    """The job's budget is spent: the shared env-step counter (every worker's steps) reached total_steps, in every
    mode (a sync job's worker count may change while it runs: `syncupdates`)."""
    return state.env_steps >= config.total_steps


def _summary(state: LearnerState, result: RunResult) -> dict[str, float]:
    """The chief's final record (`rundir.SUMMARY_FILE`): the job's counts, this process's last returns."""
    summary = {"env_steps": state.env_steps, "global_step": state.global_step, "iterations": state.iterations}
    if result.train_returns:
        summary["mean_return"] = result.train_returns[-1][1]
    if result.evaluations:
        summary["eval_mean_return"] = result.evaluations[-1][1]
    return summary


def _export(
    config: TrainerConfig,
    logdir: Path,
    state: LearnerState,
    source: Episodes,
    progress: Progress,
    evaluated: exported.Evaluation | None,
) -> None:
    """Write the final policy to exported/ (replacing the one of an earlier end of this run)."""
    out = logdir / exported.DIRECTORY
    checkpoint = checkpoints.list_checkpoints(logdir)[-1]
    preset = rundir.load_preset(logdir)
    metadata = export.export_state(out, config, state, checkpoint, source, preset, replace=True, evaluated=evaluated)
    progress.note(f"exported {out}: {checkpoint.name}, evaluation return {metadata.evaluation.mean_return:.1f}")


def _share_statistics(env: TrainingEnv, state: LearnerState) -> None:
    """Normalise with the statistics just read from the learner: the sums of every worker."""
    env.observations.shared = state.observation_moments
    env.rewards.statistics.shared = state.return_moments
