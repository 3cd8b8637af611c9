"""The trainer's sub-commands of `agents-operator`: train, visualize, evaluate, export, collect, plot, env-server.

`register(subparsers)` adds them to the main CLI. Heavy imports (TensorFlow, gymnasium, matplotlib)
happen inside the commands, so `agents-operator --help` stays fast. Mistakes a user can make (an unknown
preset or setting, a bad value, a missing run directory) print one line to stderr and exit with 2; a
run whose checkpoints cannot be restored prints the cause in one line and exits with 1.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import statistics
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agents_operator import contract, exported, naming, presets, tfconfig, tflogs
from agents_operator.config import TrainerConfig, describe, field_name
from agents_operator.trainer import checkpoints, reporting, rundir, usage


def register(subparsers: argparse._SubParsersAction) -> None:
    """The trainer's sub-commands, in the order `--help` lists them."""
    others = set(subparsers.choices)
    for add in (_add_train, _add_visualize, _add_evaluate, _add_export, _add_collect, _add_plot, _add_env_server):
        add(subparsers)
    for name, parser in subparsers.choices.items():
        if name not in others:
            parser.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                help=f"show TensorFlow's own log lines too (as {tflogs.ENV_VAR}=1 does)",
            )


def _add_train(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a policy with PPO in this process",
        description="Train with batched PPO until total_steps; checkpoints, summaries and config.yaml go to "
        "--logdir. With --resume, continue the run in --logdir from its latest checkpoint (or start it). "
        "TF_CONFIG makes this process a ps, worker or evaluator of a job; AGENTS_ENV_SERVERS "
        '(JSON: {"addresses": ["HOST:PORT", ...], "mode": "step" | "rollout"}) takes the environments, '
        "evaluations and the final video from env servers instead of this process.",
    )
    train.add_argument("--config", metavar="PRESET", help=f"preset: {', '.join(presets.names())}")
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting; VALUE is YAML (--set policy_layers=[128,128]); repeatable",
    )
    train.add_argument("--logdir", required=True, type=Path, help="run directory")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --logdir with its saved config.yaml (--config is then optional)",
    )
    train.set_defaults(func=reporting.command("train", run_train))


def _add_visualize(subparsers: argparse._SubParsersAction) -> None:
    visualize = subparsers.add_parser(
        "visualize",
        help="render a run's latest policy, or an exported one, to a GIF or MP4",
        description="Render episodes of the deterministic policy of a run's latest checkpoint (--logdir) or of "
        "an exported policy (--model), headless, here or by an env server.",
    )
    _policy_source(visualize)
    visualize.add_argument("--out", required=True, type=Path, help="output file, .gif or .mp4")
    visualize.add_argument("--episodes", type=int, default=1, help="episodes to render (default 1)")
    _env_server_option(visualize, "play and render the episodes on this env server (serving the policy's environment)")
    visualize.set_defaults(func=reporting.command("visualize", run_visualize))


def _add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="score a run's latest policy, or an exported one, over deterministic episodes",
        description="Play --episodes episodes of the deterministic policy, episode i seeded --seed + i, and "
        'print one JSON line: {"policy", "episodes", "seed", "mean", "std", "returns", "lengths"}.',
    )
    _policy_source(evaluate)
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    evaluate.add_argument(
        "--seed", type=int, help="seed of the first episode (default: the trainer's evaluation seeds of the policy)"
    )
    _env_server_option(evaluate, "play the episodes on this env server (serving the policy's environment), not here")
    evaluate.set_defaults(func=reporting.command("evaluate", run_evaluate))


def _add_export(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export",
        help="write a run's policy as a TensorFlow SavedModel",
        description="Write the policy of a checkpoint of the run in --logdir to --out: a TensorFlow SavedModel "
        "with the observation normaliser built in and the signatures act (observations -> deterministic actions, "
        "clipped to the action bounds) and sample (observations, seed -> actions, log_probs), and policy.json "
        "beside it (environment, spaces, preset, step, evaluation return). See docs/export.md.",
    )
    export.add_argument("--logdir", required=True, type=Path, help="run directory")
    export.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint ckpt-N (default: the latest)")
    export.add_argument("--out", required=True, type=Path, help="directory to write; must not exist")
    export.add_argument("--replace", action="store_true", help="replace --out if it exists")
    export.set_defaults(func=reporting.command("export", run_export))


def _add_collect(subparsers: argparse._SubParsersAction) -> None:
    collect = subparsers.add_parser(
        "collect",
        help="drive env servers with an exported policy and save the trajectories",
        description="Send an exported policy to env servers, which reset their environments and step them "
        "--steps times acting with it (sampling, the noise drawn from --seed), as the trainer's rollout mode "
        "does; write the trajectories to --out (.npz: observations, actions, log_probs, means, values, rewards, "
        "terminated, truncated and the episodes that ended, time-major). See docs/export.md.",
    )
    collect.add_argument("--model", required=True, type=Path, metavar="DIR", help="exported policy")
    collect.add_argument(
        "--env-server", required=True, action="append", metavar="HOST:PORT", help="env server; repeatable"
    )
    collect.add_argument("--steps", type=int, default=1000, help="steps per environment (default 1000)")
    collect.add_argument("--seed", type=int, default=0, help="seed of the sampling noise (default 0)")
    collect.add_argument("--out", required=True, type=Path, help="output file, .npz; must not exist")
    collect.set_defaults(func=reporting.command("collect", run_collect))


def _add_plot(subparsers: argparse._SubParsersAction) -> None:
    plot = subparsers.add_parser(
        "plot",
        help="plot learning curves of one or more runs",
        description="Plot a summary (default: training return) against environment steps, one line per run.",
    )
    plot.add_argument("--logdir", required=True, nargs="+", type=Path, help="run directories")
    plot.add_argument("--out", required=True, type=Path, help="output image (.png, .svg, .pdf)")
    plot.add_argument("--tag", default="train/mean_return", help="summary tag (default train/mean_return)")
    plot.set_defaults(func=reporting.command("plot", run_plot))


def _add_env_server(subparsers: argparse._SubParsersAction) -> None:
    env_server = subparsers.add_parser(
        "env-server",
        help="serve a batch of environments over gRPC to a trainer that runs elsewhere",
        description="Serve --envs environments of --env to one trainer over gRPC until SIGTERM or SIGINT "
        "(then close them and exit 0). Environment j is seeded with --seed + j. See docs/envserver.md.",
    )
    env_server.add_argument("--env", required=True, metavar="ID", help="gymnasium environment id")
    env_server.add_argument(
        "--port", type=int, default=contract.ENV_SERVER_PORT, help="port (default %(default)s; 0: any)"
    )
    env_server.add_argument("--envs", type=int, default=1, help="environments to serve (default 1)")
    env_server.add_argument("--seed", type=int, default=0, help="seed of the first environment (default 0)")
    env_server.add_argument("--max-episode-steps", type=int, help="time limit (default: the environment's own)")
    env_server.add_argument(
        "--envs-per-process", type=int, help="environments per subprocess (default: spread over the usable CPUs)"
    )
    env_server.set_defaults(func=reporting.command("env-server", run_env_server))


def _policy_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--logdir", type=Path, help="run directory: play its latest checkpoint")
    source.add_argument("--model", type=Path, metavar="DIR", help="exported policy (agents-operator export)")


def _env_server_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--env-server", metavar="HOST:PORT", help=text)


def _check_backup_workers(config: TrainerConfig, tf_config: tfconfig.TFConfig | None) -> None:
    """A sync cluster's updates must each have a change to aggregate: UsageError before TensorFlow starts."""
    if tf_config is not None and tf_config.num_ps and config.mode == "sync" and tf_config.num_workers > 1:
        try:
            config.aggregated_changes(tf_config.num_workers)
        except ValueError as error:
            raise usage.UsageError(f"backup_workers: {error}") from None


def run_train(args: argparse.Namespace) -> int:
    config = resolve_train_config(args.config, args.overrides, args.logdir, args.resume)
    try:
        tf_config = tfconfig.from_env(os.environ, lambda path: Path(path).read_text())
    except tfconfig.TFConfigError as error:
        raise usage.UsageError(f"{tfconfig.ENV_VAR}: {error}") from None
    role = tf_config.task_type if tf_config is not None else naming.WORKER
    _check_backup_workers(config, tf_config)
    env_servers = usage.env_servers() if role != naming.PS else None
    _quiet_tensorflow()
    from agents_operator.trainer import distributed, loop

    if role == naming.PS:
        return distributed.run_ps(tf_config, config.threads)
    if role == naming.EVALUATOR:
        from agents_operator.trainer import evaluator

        return evaluator.run(config, args.logdir, env_servers=env_servers)
    if env_servers is None:
        usage.check_env_id(config.env_id)  # with env servers, this process may have no simulator at all
    # A TF_CONFIG without parameter servers is a single worker: train locally.
    cluster = distributed.Cluster(tf_config) if tf_config is not None and tf_config.num_ps else None
    bind = tfconfig.bind_host(os.environ)
    result = loop.train(
        config, args.logdir, cluster=cluster, env_servers=env_servers, metrics_host=bind, preset=args.config
    )
    if result.stopped:
        return reporting.STOPPED
    logging.getLogger(__name__).info("done: %d env steps, %d iterations", result.env_steps, result.iterations)
    return 0


def run_visualize(args: argparse.Namespace) -> int:
    if args.out.suffix not in (".gif", ".mp4"):
        raise usage.UsageError(f"--out {args.out}: the file name must end in .gif or .mp4")
    if args.episodes < 1:
        raise usage.UsageError("--episodes must be at least 1")
    if args.out.suffix == ".mp4" and not usage.importable("imageio_ffmpeg"):
        raise usage.UsageError("writing .mp4 needs the imageio-ffmpeg package; write a .gif instead")
    config = _check_policy_source(args)
    _quiet_tensorflow()
    from agents_operator.trainer import visualize

    if config is None:
        returns = visualize.render_model(args.model, args.out, args.episodes, args.env_server)
        played = str(args.model)
    else:
        returns, played = visualize.render(config, args.logdir, args.out, args.episodes, args.env_server)
    shown = ", ".join(f"{r:.1f}" for r in returns)
    print(f"wrote {args.out}: {len(returns)} episode(s) of {played}, returns {shown}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise usage.UsageError("--episodes must be at least 1")
    if args.seed is not None and args.seed < 0:
        raise usage.UsageError("--seed must be at least 0")
    config = _check_policy_source(args)
    _quiet_tensorflow()
    from agents_operator.trainer import playback

    if config is None:
        player = playback.of_model(args.model, args.env_server, args.episodes)
    else:
        player = playback.of_run(config, args.logdir, args.env_server, args.episodes)
    with player as played:
        seed = played.seed if args.seed is None else args.seed
        returns, lengths = played.play(args.episodes, seed)
        name = played.name
    result = {"policy": name, "episodes": args.episodes, "seed": seed, "mean": statistics.fmean(returns)}
    result.update(std=statistics.pstdev(returns), returns=returns, lengths=lengths)
    print(json.dumps(result))
    return 0


def run_export(args: argparse.Namespace) -> int:
    config = usage.saved_config(args.logdir)
    if args.checkpoint is not None and args.checkpoint < 0:
        raise usage.UsageError("--checkpoint must be at least 0")
    if not checkpoints.list_checkpoints(args.logdir):
        raise usage.UsageError(f"no checkpoint in {checkpoints.directory(args.logdir)}")
    if args.out.exists() and not args.replace:
        raise usage.UsageError(f"--out {args.out}: already exists; pass --replace to replace it, or choose another")
    usage.check_env_id(config.env_id)
    _quiet_tensorflow()
    from agents_operator.trainer import export

    preset = rundir.load_preset(args.logdir)
    metadata = export.export_run(config, args.logdir, args.out, args.checkpoint, preset, args.replace)
    evaluation = metadata.evaluation
    print(
        f"wrote {args.out}: {metadata.checkpoint} ({metadata.env_steps} env steps), evaluation return "
        f"{evaluation.mean_return:.1f} over {evaluation.episodes} episode(s)"
    )
    return 0


def run_collect(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise usage.UsageError("--steps must be at least 1")
    if args.seed < 0:
        raise usage.UsageError("--seed must be at least 0")
    if args.out.suffix != ".npz":
        raise usage.UsageError(f"--out {args.out}: the file name must end in .npz")
    if args.out.exists():
        raise usage.UsageError(f"--out {args.out}: already exists; choose another file")
    env_id = exported.read_metadata(args.model).env_id
    for address in args.env_server:
        usage.check_env_server(address, env_id)
    _quiet_tensorflow()
    import numpy as np

    from agents_operator.trainer import playback

    rollout = playback.collect(args.model, args.env_server, args.steps, args.seed)
    np.savez(args.out, **rollout.to_message())
    returns = rollout.episode_returns
    ended = f", mean return {returns.mean():.1f}" if len(returns) else ""
    envs = rollout.rewards.shape[1]
    print(f"wrote {args.out}: {args.steps} steps of {envs} environment(s), {len(returns)} episode(s) ended{ended}")
    return 0


def _check_policy_source(args: argparse.Namespace) -> TrainerConfig | None:
    """Check --logdir (the run's config, returned) or --model (None), and --env-server, before anything heavy."""
    if args.model is not None:
        env_id = exported.read_metadata(args.model).env_id
        config = None
    else:
        config = usage.saved_config(args.logdir)
        if not checkpoints.list_checkpoints(args.logdir):
            raise usage.UsageError(f"no checkpoint in {checkpoints.directory(args.logdir)}")
        env_id = config.env_id
    if args.env_server is not None:
        usage.check_env_server(args.env_server, env_id)
    else:
        usage.check_env_id(env_id)
    return config


def run_plot(args: argparse.Namespace) -> int:
    for logdir in args.logdir:
        if not any(Path(logdir).glob(rundir.EVENTS)):
            raise usage.UsageError(f"no summaries in {logdir}")
    _quiet_tensorflow()
    from agents_operator.trainer import plot

    try:
        counts = plot.plot(args.logdir, args.out, args.tag)
    except ValueError as error:
        raise usage.UsageError(str(error)) from None
    print(f"wrote {args.out}: " + ", ".join(f"{run} ({n} points)" for run, n in counts.items()))
    return 0


def run_env_server(args: argparse.Namespace) -> int:
    for name in ("envs", "envs_per_process", "max_episode_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise usage.UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.port <= 65535:
        raise usage.UsageError(f"--port {args.port}: not a port number")
    usage.check_env_id(args.env)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from agents_operator.trainer.envserver import server

    try:
        return server.serve(
            args.env,
            args.envs,
            args.port,
            args.seed,
            args.max_episode_steps,
            args.envs_per_process,
            host=tfconfig.bind_host(os.environ) or server.ALL_INTERFACES,
        )
    except server.StartError as error:
        raise usage.UsageError(str(error)) from None


def resolve_train_config(preset: str | None, overrides: list[str], logdir: Path, resume: bool) -> TrainerConfig:
    """The config a `train` invocation runs with; see `rundir` for the rules on resume."""
    settings = parse_overrides(overrides)
    saved = usage.load_saved(logdir)
    if saved is not None and not resume:
        raise usage.UsageError(f"{logdir} already holds a run: pass --resume to continue it, or pick a new --logdir")
    if preset is None and saved is None:
        raise usage.UsageError("--config PRESET is required to start a run")
    try:
        if preset is not None:
            config = presets.resolve(preset, settings)
        else:
            config = TrainerConfig.model_validate({**saved.model_dump(), **settings})
    except KeyError as error:
        raise usage.UsageError(error.args[0]) from None
    except ValidationError as error:
        raise usage.UsageError(describe(error)) from None
    if saved is not None:
        try:
            rundir.check_resume(saved, config)
        except rundir.ConfigConflict as error:
            raise usage.UsageError(str(error)) from None
    return config


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` arguments as {field name: YAML-parsed value}; keys may be camelCase aliases."""
    known = sorted(TrainerConfig.model_fields)
    settings: dict[str, Any] = {}
    for item in items:
        key, equals, text = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise usage.UsageError(f"--set {item!r}: expected KEY=VALUE")
        name = field_name(key)
        if name is None:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise usage.UsageError(f"--set {key}: unknown setting{hint}; settings: {', '.join(known)}")
        try:
            settings[name] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise usage.UsageError(f"--set {key}: {text!r} is not a YAML value") from None
    return settings


def _quiet_tensorflow() -> None:
    """Log lines for people: INFO from the trainer; TensorFlow's Python loggers (deprecation notices, how a
    SavedModel names its captured inputs) only with `-v` (its native lines: `tflogs`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if tflogs.shown(os.environ):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.WARNING)
