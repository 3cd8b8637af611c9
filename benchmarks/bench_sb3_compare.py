"""The referee: this trainer against Stable-Baselines3 PPO on the same tasks and budget; prints one JSON line.

For each task (`--tasks`, default Pendulum-v1 and HalfCheetahBulletEnv-v0), runs interleaved, `--rounds` times
over: this trainer (`loop.train`, the task's preset, serial: `ours`), the same overlapped (config `overlap`:
`ours_overlap`), then SB3 PPO with the preset's hyperparameters
(`sb3_identical`), then SB3 PPO with the rl-baselines3-zoo hyperparameters of the task (`sb3_zoo`). Each trains
for `--steps` env steps (`--quick`: one update of the preset, a few thousand steps; SB3 collects at least one
rollout of its own setting, so its count may be larger, and every rate is of the steps actually taken) and is
then evaluated the same way: the trainer's `episodes.play`, `eval_episodes` episodes of the deterministic
policy (the Gaussian's mean on the normalised observation, clipped to the action bounds) with the trainer's
evaluation seeds, on an environment of the trainer's `make_env`. Round i runs every setting with seed `--seed`
+ i. Reported per setting (medians over the rounds): end-to-end env steps/s (start-up included, the final
evaluation not), the sampling and update seconds and their rates, the rest of the wall time (`other_s`:
start-up, checkpoints), the evaluation return of each round and their mean; for this trainer also the run's
`perf/simulation_share` over its sampling phases (the share of its environment processes' time spent in the
simulator); and per task and SB3 setting the ratios ours / SB3 of the three rates (higher: ours faster) and the
difference of the mean returns, and the same ratios for `ours_overlap` against `ours` and each SB3 setting
(`overlap_ratios`; overlapped, `sampling_s` is the time the learner waited for a rollout and batched it, not
a rollout's wall time).

SB3 runs in a subprocess (`sb3_runner.py`) in its own venv, so this process never imports torch:
`benchmarks/.venv-sb3` (git-ignored; `--venv` for another), created on first use or by `--setup`, with
torch and stable-baselines3 pinned below and gymnasium, numpy, pybullet, pybullet-envs-gymnasium and cloudpickle
pinned as in locks/trainer.txt. torch comes from the PyTorch CPU wheel index, or from PyPI when that index is
unreachable (PyPI's Linux torch is the CUDA build, a much larger download). Both sides make their environments
with `make_env` from the same gymnasium ids (PyBullet's from pybullet_envs_gymnasium).

`sb3_identical` is derived from the resolved preset (`identical`): n_envs = envs_per_worker, n_steps =
rollout_steps, batch_size = the minibatch size, n_epochs, learning rate and its schedule (linear: a callable
that anneals as the trainer does), gamma, GAE lambda, clip range, entropy and value coefficients (vf_coef is half
of value_coef: SB3's value loss is the mean squared error, the trainer's half of it), gradient-norm clipping,
advantage normalisation, separate policy and value networks of the preset's layers and activation, orthogonal
init, initial log std, Adam epsilon, VecNormalize with the preset's observation/reward normalisation and clipping
and discount, SubprocVecEnv, torch threads = the preset's `threads`; the time limit is the same because both use
`make_env`, and SB3 bootstraps truncated episodes as the trainer does. What SB3 cannot express, and how each
is handled, is `UNMATCHED` (also in `--help`): the KL-penalty objective (refused), the trainer's pessimistic
value clipping (no preset uses it), several environments per process, the initial weights without orthogonal
initialisation unless `plain_init` is pytorch, and how observation statistics move:
VecNormalize updates them every step with every environment's observations, where the trainer normalises a
whole rollout with the statistics from before it (`observation_statistics: rollout`, the first rollout
unnormalised) or each process updates them every step with its own environments' (`step`). The JSON lists
these per task under `differences`.

`sb3_zoo` is `ZOO`, from DLR-RM/rl-baselines3-zoo, hyperparams/ppo.yml at commit 208b6fdf3a9a (every entry
"# Tuned"; n_timesteps is replaced by `--steps`):

    Pendulum-v1: n_envs 4, policy 'MlpPolicy', n_steps 1024, gae_lambda 0.95, gamma 0.9, n_epochs 10,
      ent_coef 0.0, learning_rate 1e-3, clip_range 0.2, use_sde True, sde_sample_freq 4
    HalfCheetahBulletEnv-v0: normalize true, n_envs 16, policy 'MlpPolicy', batch_size 128, n_steps 512,
      gamma 0.99, gae_lambda 0.9, n_epochs 20, ent_coef 0.0, sde_sample_freq 4, max_grad_norm 0.5, vf_coef 0.5,
      learning_rate 3e-5, use_sde True, clip_range 0.4, policy_kwargs "dict(log_std_init=-2, ortho_init=False,
      activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256]))"
    HopperBulletEnv-v0: the HalfCheetahBulletEnv-v0 entry ("<<: *pybullet-defaults") with the same learning rate
      and policy_kwargs and clip_range lin_0.4 (`clip_schedule` sb3_linear: 0.4 annealed to 0 over the run)
    Walker2DBulletEnv-v0: the same as HopperBulletEnv-v0

Everything else is SB3's default (Pendulum's batch_size 64, 64x64 tanh networks; `normalize: true` is
VecNormalize with its defaults, whose gamma 0.99 is the entry's). The zoo's train.py leaves torch its default
threads (`--num-threads -1`), as here, and defaults to `--vec-env dummy`; here both SB3 settings use its
`subproc`, so that every side simulates on all cores and the settings differ only in hyperparameters.

    .venv/bin/python benchmarks/bench_sb3_compare.py --setup       # create benchmarks/.venv-sb3, then exit
    .venv/bin/python benchmarks/bench_sb3_compare.py --quick       # a few minutes: the script end to end
    .venv/bin/python benchmarks/bench_sb3_compare.py --steps 100000 --rounds 2
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import collections
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents_operator import presets, topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer import loop
from agents_operator.trainer.envs.make import usable_cpus

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "benchmarks" / "sb3_runner.py"
VENV = ROOT / "benchmarks" / ".venv-sb3"
LOCK = ROOT / "locks" / "trainer.txt"
SB3_PINS = ("torch==2.13.0", "stable-baselines3==2.9.2")
SHARED_WITH_TRAINER = ("gymnasium", "numpy", "pybullet", "pybullet-envs-gymnasium", "cloudpickle")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TASKS = ("pendulum", "cheetah")

ZOO: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {
        "n_envs": 4,
        "normalize": None,
        "ppo": {
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
        },
        "lr_schedule": "constant",
        "policy": {},
    },
    "HalfCheetahBulletEnv-v0": {
        "n_envs": 16,
        "normalize": {},
        "ppo": {
            "batch_size": 128,
            "n_steps": 512,
            "gamma": 0.99,
            "gae_lambda": 0.9,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "sde_sample_freq": 4,
            "max_grad_norm": 0.5,
            "vf_coef": 0.5,
            "learning_rate": 3e-5,
            "use_sde": True,
            "clip_range": 0.4,
        },
        "lr_schedule": "constant",
        "policy": {
            "log_std_init": -2,
            "ortho_init": False,
            "activation": "relu",
            "net_arch": {"pi": [256, 256], "vf": [256, 256]},
        },
    },
}
ZOO["HopperBulletEnv-v0"] = {**ZOO["HalfCheetahBulletEnv-v0"], "clip_schedule": "sb3_linear"}
ZOO["Walker2DBulletEnv-v0"] = ZOO["HopperBulletEnv-v0"]
"""rl-baselines3-zoo's settings (see the module docstring), in `sb3_runner.py`'s terms: `normalize` is the
keyword arguments of VecNormalize (None: none), `activation` names the activation_fn."""

UNMATCHED = {
    "objective": "SB3 PPO has only the clipped surrogate: `identical` refuses a config with objective kl_penalty",
    "kl_target": "used only by objective kl_penalty (refused)",
    "kl_init_penalty": "used only by objective kl_penalty (refused)",
    "kl_cutoff_factor": "used only by objective kl_penalty (refused)",
    "kl_cutoff_coef": "used only by objective kl_penalty (refused)",
    "value_clip": "SB3's clip_range_vf takes the clipped value loss alone, the trainer the larger of clipped and "
    "unclipped: passed as clip_range_vf and listed under `differences` when set",
    "envs_per_process": "SubprocVecEnv runs one process per environment, the trainer envs_per_process per process "
    "(unset: one process per usable CPU): listed under `differences`",
    "overlap": "SB3 samples and updates in turn: compared with the trainer's serial loop (`ours`) and as "
    "`ours_overlap`, its sampling overlapped",
    "overlap_values": "used only with overlap (`ours_overlap`)",
    "mode": "one worker: sync and async are the same run",
    "backup_workers": "one worker: no update waits for another",
    "async_updates": "one worker: no other worker updates (in turn or not)",
    "async_clip_range_floor": "one worker: no async worker in a cluster (clip_range_floor is handed over)",
    "checkpoint_every": "outputs: the trainer checkpoints only at the end here, SB3 saves nothing",
    "eval_every": "outputs: both evaluate once, at the end",
    "video_episodes": "outputs: none rendered here",
    "export": "outputs: nothing exported here",
    "metrics_port": "outputs: no /metrics here",
    "plain_init": "SB3's ortho_init=False keeps PyTorch's init, which is plain_init pytorch; glorot_uniform is "
    "listed under `differences`",
    "observation_statistics": "VecNormalize updates its statistics every step with all the environments' "
    "observations: with `step` the trainer's processes do so with their own environments' each, with `rollout` "
    "the statistics are fixed per rollout; listed under `differences`",
}
"""The settings of `TrainerConfig` that SB3 cannot express as the trainer means them, or that only shape the
outputs of a run, and how the referee handles each."""


def our_config(task: str, steps: int | None, eval_episodes: int | None, seed: int) -> TrainerConfig:
    """The task's preset as this trainer runs it here: `steps` env steps (None: one update), evaluation only at
    the end (`eval_episodes`, None: the preset's), no checkpoints before the end, no video, export or metrics."""
    preset = presets.resolve(task)
    settings = {
        "total_steps": steps or preset.batch_size,
        "seed": seed,
        "eval_episodes": eval_episodes or preset.eval_episodes,
        "eval_every": 1_000_000,
        "checkpoint_every": 1_000_000,
        "video_episodes": 0,
        "export": False,
        "metrics_port": 0,
    }
    return presets.resolve(task, settings)


def _common(config: TrainerConfig) -> dict[str, Any]:
    """What every SB3 setting shares with the trainer's run: task, time limit, budget, seed, evaluation."""
    return {
        "env_id": config.env_id,
        "max_episode_steps": config.max_episode_steps,
        "steps": config.total_steps,
        "seed": config.seed,
        "evaluation": {"episodes": config.eval_episodes, "seed": config.seed + topology.EVALUATION_SEED_OFFSET},
    }


def identical(config: TrainerConfig) -> dict[str, Any]:
    """The `sb3_runner.py` setting that does what `config` does, as far as SB3 can (see `UNMATCHED`)."""
    if config.objective != "clip":
        raise ValueError(f"SB3 PPO has no {config.objective!r} objective: only the clipped surrogate")
    normalize = {
        "norm_obs": config.normalize_observations,
        "norm_reward": config.normalize_rewards,
        "clip_obs": config.clip_observations,
        "clip_reward": config.clip_rewards,
        "gamma": config.discount,
    }
    ppo = {
        "n_steps": config.rollout_steps,
        "batch_size": config.minibatch_size,
        "n_epochs": config.epochs,
        "learning_rate": config.learning_rate,
        "gamma": config.discount,
        "gae_lambda": config.gae_lambda,
        "clip_range": config.clip_range,
        "clip_range_vf": config.value_clip,
        "normalize_advantage": config.normalize_advantages,
        "ent_coef": config.entropy_coef,
        "vf_coef": config.value_coef / 2,  # SB3: vf_coef x mean squared error; the trainer: value_coef x half of it
        "max_grad_norm": math.inf if config.max_grad_norm is None else config.max_grad_norm,
    }
    if config.exploration == "state_dependent":  # SB3's gSDE (full_std, no learn_features), weights held as ours
        ppo.update({"use_sde": True, "sde_sample_freq": config.exploration_hold})
    policy = {
        "net_arch": {"pi": config.policy_layers, "vf": config.value_layers},
        "activation": config.activation,
        "log_std_init": config.init_log_std,
        "ortho_init": config.orthogonal_init,
        "optimizer_kwargs": {"eps": config.adam_epsilon},
    }
    return {
        **_common(config),
        "n_envs": config.envs_per_worker,
        "normalize": normalize,
        "ppo": ppo,
        "lr_schedule": config.lr_schedule,
        "clip_schedule": config.clip_schedule,
        "clip_range_floor": config.clip_range_floor,
        "entropy_schedule": config.entropy_schedule,
        "policy": policy,
        "threads": config.threads,
    }


def zoo(config: TrainerConfig) -> dict[str, Any]:
    """The `sb3_runner.py` setting of rl-baselines3-zoo for the task of `config`, torch at its default threads."""
    return {**_common(config), **ZOO[config.env_id], "threads": None}


def differences(config: TrainerConfig) -> list[str]:
    """How `identical(config)` still trains otherwise than the trainer."""
    spread = "one per usable CPU" if config.envs_per_process is None else f"{config.envs_per_process} envs each"
    statistics = {
        "rollout": "the trainer once per rollout (the first rollout unnormalised)",
        "step": "the trainer every step too, but each environment process with its own environments' observations",
    }[config.observation_statistics]
    found = [
        f"normalisation statistics: VecNormalize updates them every step with every environment's, {statistics}",
        f"environment processes: SB3 {config.envs_per_worker} (one per environment), the trainer {spread}",
    ]
    if config.value_clip is not None:
        found.append(f"value_clip: {UNMATCHED['value_clip']}")
    if not config.orthogonal_init and config.plain_init != "pytorch":
        found.append(f"initial weights: the trainer {config.plain_init}, SB3 PyTorch's default (plain_init pytorch)")
    return found


def shared_pins(lock: Path = LOCK) -> list[str]:
    """The trainer's pins (`name==version`) of the packages the SB3 venv shares with it."""
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", lock.read_text(), flags=re.M))
    return [f"{name}=={pins[name]}" for name in SHARED_WITH_TRAINER]


def requirements() -> list[str]:
    return [*SB3_PINS, *shared_pins()]


def setup_venv(venv: Path) -> None:
    """Create `venv` with `requirements()`: torch from the PyTorch CPU index, or PyPI when that is unreachable."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    torch, *others = requirements()
    cpu_only = [*pip, "--retries", "1", "--timeout", "20", "--index-url", TORCH_CPU_INDEX, torch]
    if subprocess.run(cpu_only, stdout=sys.stderr).returncode:
        print(f"{TORCH_CPU_INDEX} failed: {torch} from the default index", file=sys.stderr)
        subprocess.run([*pip, torch], stdout=sys.stderr, check=True)
    subprocess.run([*pip, *others], stdout=sys.stderr, check=True)
    (venv / "referee-requirements.txt").write_text("\n".join(requirements()) + "\n")


def venv_python(venv: Path, setup: bool) -> Path:
    """The SB3 venv's interpreter; the venv is (re)made when asked, missing, or made with other pins."""
    marker = venv / "referee-requirements.txt"
    if setup or not marker.exists() or marker.read_text().split() != requirements():
        print(f"setting up {venv}: {' '.join(requirements())}", file=sys.stderr)
        setup_venv(venv)
    return venv / "bin" / "python"


def run_ours(config: TrainerConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        result = loop.train(config, Path(scratch) / "run")
    return {
        "env_steps": result.env_steps,
        "wall_s": result.wall_seconds - result.evaluation_seconds,
        "sampling_s": result.sampling_seconds,
        "update_s": sum(result.update_seconds),
        "eval_return": result.evaluations[-1][1],
        "simulation_share": result.simulation_share,
    }


def run_sb3(python: Path, setting: dict[str, Any]) -> dict[str, Any]:
    """`sb3_runner.py` in the SB3 venv on `setting`; its report, with the mean evaluation return. The runner's
    standard error goes on to ours as it comes (its evaluations during long runs), and its end into the error
    when it fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile("w+") as stdout:
        runner = subprocess.Popen(
            [str(python), str(RUNNER)], stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env
        )
        runner.stdin.write(json.dumps(setting))
        runner.stdin.close()
        tail: collections.deque[str] = collections.deque(maxlen=40)
        for line in runner.stderr:
            sys.stderr.write(line)
            tail.append(line)
        if runner.wait():
            raise RuntimeError(f"{RUNNER.name} exited {runner.returncode}:\n{''.join(tail)[-4000:]}")
        stdout.seek(0)
        report = json.loads(stdout.read().splitlines()[-1])
    return {**report, "eval_return": statistics.fmean(report["eval_returns"])}


RATES = {"steps_per_s": "wall_s", "sampling_steps_per_s": "sampling_s", "update_steps_per_s": "update_s"}
"""Each reported rate: env steps per second of that phase."""


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of one setting's runs; the evaluation returns of every round (one seed each) and
    their mean."""
    summary: dict[str, Any] = {"env_steps": statistics.median(run["env_steps"] for run in runs)}
    for rate, seconds in RATES.items():
        summary[seconds] = round(statistics.median(run[seconds] for run in runs), 2)
        summary[rate] = round(statistics.median(run["env_steps"] / run[seconds] for run in runs), 1)
    other = statistics.median(run["wall_s"] - run["sampling_s"] - run["update_s"] for run in runs)
    summary["other_s"] = round(other, 2)  # start-up, checkpoints
    summary["eval_returns"] = [round(run["eval_return"], 1) for run in runs]
    summary["eval_return"] = round(statistics.fmean(run["eval_return"] for run in runs), 1)
    if runs[0].get("simulation_share") is not None:  # ours, serial (overlapped, no sampling phase is timed)
        summary["simulation_share"] = round(statistics.median(run["simulation_share"] for run in runs), 3)
    if "torch_threads" in runs[0]:
        summary["torch_threads"] = runs[0]["torch_threads"]
    return summary


def ratios(ours: dict[str, Any], sb3: dict[str, Any]) -> dict[str, float]:
    """Ours / SB3 of each rate (above 1: ours faster), and ours - SB3 of the evaluation return (returns may be
    negative, so no ratio)."""
    found = {rate: round(ours[rate] / sb3[rate], 3) for rate in RATES}
    found["eval_return_difference"] = round(ours["eval_return"] - sb3["eval_return"], 1)
    return found


def compare(config: TrainerConfig, rounds: int, python: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """One task, interleaved: ours (serial), ours overlapped, SB3 identical, SB3 zoo, `rounds` times, round i
    with seed `config.seed` + i; its record and SB3's versions."""
    names = ("sb3_identical", "sb3_zoo")
    ours = {"ours": {"overlap": False}, "ours_overlap": {"overlap": True}}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in (*ours, *names)}
    for round_index in range(rounds):
        seeded = config.model_copy(update={"seed": config.seed + round_index})
        for name, update in ours.items():
            runs[name].append(run_ours(seeded.model_copy(update=update)))
        for name, setting in zip(names, (identical(seeded), zoo(seeded)), strict=True):
            runs[name].append(run_sb3(python, setting))
    summaries = {name: summarise(found) for name, found in runs.items()}
    record = {
        "env_id": config.env_id,
        **summaries,
        "ratios": {name: ratios(summaries["ours"], summaries[name]) for name in names},
        "overlap_ratios": {name: ratios(summaries["ours_overlap"], summaries[name]) for name in ("ours", *names)},
        "differences": differences(config),
    }
    return record, runs["sb3_zoo"][-1]["versions"]


def build_parser() -> argparse.ArgumentParser:
    unmatched = "\n".join(f"  {name}: {how}" for name, how in UNMATCHED.items())
    heading = "Settings SB3 cannot express as the trainer means them, or that only shape a run's outputs:"
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"{heading}\n{unmatched}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    refereed = [name for name in presets.names() if presets.resolve(name).env_id in ZOO]
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=refereed, help="presets to compare")
    parser.add_argument("--steps", type=int, help="env steps each run trains for (default 100000)")
    parser.add_argument("--quick", action="store_true", help="one update of each preset, 2 episodes, 1 round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per task, one seed each (default 2)")
    parser.add_argument("--eval-episodes", type=int, help="episodes of the final evaluation (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0, help="the first round's seed; round i runs seed + i")
    parser.add_argument("--venv", type=Path, default=VENV, help=f"the SB3 venv (default {VENV.relative_to(ROOT)})")
    parser.add_argument("--setup", action="store_true", help="(re)create the SB3 venv, then exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    python = venv_python(args.venv, args.setup)
    if args.setup:
        return 0
    steps = args.steps if args.steps is not None else (None if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 2)
    episodes = args.eval_episodes or (2 if args.quick else None)
    load_before = os.getloadavg()[0]
    tasks, versions = {}, {}
    for task in args.tasks:
        tasks[task], versions = compare(our_config(task, steps, episodes, args.seed), rounds, python)
    measured = {
        "steps": steps or "one update of the preset",
        "rounds": rounds,
        "cpus": usable_cpus(),
        "load_average_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        **versions,
    }
    print(json.dumps({"measured": measured, **tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
