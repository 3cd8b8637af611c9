"""Learning over seeds: every preset, several seeds, at rl-baselines3-zoo's budget; a table, curves, one JSON line.

For each preset (`--tasks`) and seed (`--seeds`, default 0 1 2) the trainer trains the preset at its
reference budget (`REFERENCES`: the zoo's for the tasks the zoo's benchmark.md lists; the preset's own for
the others) in a child process, in its own run directory under `--results`. The evaluations are the
trainer's own, the way the referee (`bench_sb3_compare.py`) scores both sides: the deterministic policy,
the preset's `eval_episodes`, episode i seeded `seed` + `EVALUATION_SEED_OFFSET` + i; about `EVALUATIONS`
of them per run, the last at the end of the budget. A run's return is its final evaluation's mean.

The table resumes: a finished run keeps its `result.json` and is not trained again; an interrupted one
continues from its latest checkpoint (its wall time adds up over the pieces, each piece's start-up
included, evaluations excluded). A finished run of a preset is also kept in `--records`
(`learning_records`, in the repository), and counts from there on a machine without its run directory.
After every run the table (markdown) and one PNG of learning curves per task (every seed on one axis, the
zoo's return drawn) are written again from every finished run in `--results` and `--records`, whichever
invocation trained it (a preset with neither keeps its earlier row, marked): the table between the
`MARKERS` in `--doc` (docs/trainer.md), the PNGs in `--figures` (docs/learning/).

    .venv/bin/python benchmarks/bench_learning_table.py                     # everything, hours on 2 cores
    .venv/bin/python benchmarks/bench_learning_table.py --tasks pendulum --seeds 0 1 2 3 4 5 6 7 8 9

`--steps N` replaces every budget (a smoke run; the table then says so in its budget column). `--set KEY=VALUE`
trains a variant (an ablation) in run directories of its own and only prints its rows: the doc's table holds
the presets themselves. Runs are long: run them on a quiet machine, one table at a time (the env processes
use every core).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents_operator import presets

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_records  # benchmarks/, also when imported from the tests

ROOT = learning_records.ROOT
PROCESS_STARTED = time.monotonic()  # for a child's wall time, its imports included
RESULT = "result.json"  # a finished run's record, in its run directory
PIECES = "pieces.jsonl"  # one line per piece of training (a run interrupted and resumed has several)
MARKERS = ("<!-- learning-table:begin -->", "<!-- learning-table:end -->")
EVALUATIONS = 24  # per run, about: the curve's resolution against the time the evaluations take
WORKERS = "workers"  # the variant's key for a local job of 1 ps and this many async workers
LOCOMOTION_FLOOR = 0.9  # of the zoo's return: the worst seed of a locomotion task stays at or above it
NAME_LIMIT = 200  # bytes of a run directory's name: a file name holds 255, and the table appends to some
DIGEST_CHARS = 12  # of the sha256 that ends a name cut to NAME_LIMIT
DIAGNOSTICS = ("eval/mean_length", "train/mean_return", "policy/entropy", "policy/approx_kl", "policy/clipfrac")
"""Summaries a record keeps beside its curve, at the curve's steps, for when its run directory is gone: what
tells a seed standing still for an alive bonus (evaluations that last the whole episode and score about one a
step, the policy's entropy falling) from a slow one, and how large its updates were."""


@dataclass(frozen=True)
class Reference:
    """What a preset's row is measured against: the zoo's PPO return at its budget, or the task's maximum."""

    budget: int
    zoo: float | None = None  # rl-baselines3-zoo benchmark.md, PPO, one run, deterministic evaluation
    maximum: float | None = None  # the highest return the task allows
    locomotion: bool = False
    why: str = "rl-baselines3-zoo's budget"


REFERENCES: dict[str, Reference] = {
    "Pendulum-v1": Reference(100_000, zoo=-172.2),
    "ReacherBulletEnv-v0": Reference(1_000_000, zoo=17.1),
    "HopperBulletEnv-v0": Reference(2_000_000, zoo=2575.0, locomotion=True),
    "HalfCheetahBulletEnv-v0": Reference(2_000_000, zoo=2925.0, locomotion=True),
    "Walker2DBulletEnv-v0": Reference(2_000_000, zoo=2110.0, locomotion=True),
    "AntBulletEnv-v0": Reference(2_000_000, zoo=2866.0, locomotion=True),
    "InvertedPendulumBulletEnv-v0": Reference(150_000, maximum=1000.0, why="the preset's; the zoo lists no PPO row"),
    "InvertedDoublePendulumBulletEnv-v0": Reference(
        1_000_000, maximum=9350.0, why="the preset's; the zoo lists no PPO row"
    ),
    "HumanoidBulletEnv-v0": Reference(
        10_000_000,
        locomotion=True,
        why="the zoo's: hyperparams/ppo.yml gives its untuned ('To be tuned') humanoid entry 1e7 steps, and its "
        "benchmark lists no PPO row for humanoid",
    ),
}
"""Per env id. The zoo's figures are rl-baselines3-zoo benchmark.md's (PPO); `bench_time_to_return` aims at them."""


def reference(task: str) -> Reference:
    return REFERENCES[presets.resolve(task).env_id]


def run_config(task: str, seed: int, steps: int, variant: dict[str, Any] | None = None):
    """The preset (with the `variant`'s settings) at `steps` env steps and `seed`, evaluated about EVALUATIONS
    times; no video, export or metrics."""
    preset = presets.resolve(task, variant)
    every = max(1, round(steps / preset.batch_size / EVALUATIONS))
    settings = {**(variant or {}), "total_steps": steps, "seed": seed, "eval_every": every, "checkpoint_every": every}
    return presets.resolve(task, {**settings, "video_episodes": 0, "export": False, "metrics_port": 0})


def job_config(task: str, seed: int, steps: int, variant: dict[str, Any]):
    """What a run of `variant` trains with: `run_config`, and async mode for a distributed one."""
    config = run_config(task, seed, steps, {key: value for key, value in variant.items() if key != WORKERS})
    return config.model_copy(update={"mode": "async"}) if variant.get(WORKERS, 1) > 1 else config


def train_piece(task: str, seed: int, steps: int, logdir: Path, variant: dict[str, Any]) -> dict[str, Any]:
    """Train (or continue) one run here, or as a local job with `variant[WORKERS]` workers; append the piece's
    times to PIECES; the record once it is done."""
    from agents_operator.trainer.summaries import read_tags

    load = os.getloadavg()[0]
    config = job_config(task, seed, steps, variant)
    workers = variant.get(WORKERS, 1)
    piece = _train_here(config, logdir) if workers == 1 else _train_job(task, config, workers, logdir)
    piece["process_s"] = round(time.monotonic() - PROCESS_STARTED, 1)
    piece["load_average_1m"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    with open(logdir / PIECES, "a") as pieces:
        pieces.write(json.dumps(piece) + "\n")
    series = read_tags(logdir, ("eval/mean_return", *DIAGNOSTICS))
    curve = [[steps, round(value, 1)] for steps, value in series["eval/mean_return"]]
    env_steps = piece.pop("job_env_steps")
    diagnostics = {tag: at_steps(series[tag], [step for step, _ in curve]) for tag in DIAGNOSTICS}
    return {
        "task": task,
        "seed": seed,
        "budget": steps,
        "env_steps": env_steps,
        "curve": curve,
        "diagnostics": diagnostics,
        "variant": variant,
    }


def at_steps(points: list[tuple[int, float]], steps: list[int]) -> list[list[float]]:
    """The last of `points` (step, value) at or before each of `steps`, to 4 significant digits; a step that
    none precedes is left out."""
    kept, index, last = [], 0, None
    for step in steps:
        while index < len(points) and points[index][0] <= step:
            last, index = points[index][1], index + 1
        if last is not None:
            kept.append([step, float(f"{last:.4g}")])
    return kept


def _train_here(config, logdir: Path) -> dict[str, Any]:
    from agents_operator.trainer import loop

    result = loop.train(config, logdir)
    return {
        "wall_s": round(result.wall_seconds, 1),
        "evaluation_s": round(result.evaluation_seconds, 1),
        "env_steps": result.sampling_steps,
        "job_env_steps": result.env_steps,
    }


def _train_job(task: str, config, workers: int, logdir: Path) -> dict[str, Any]:
    """1 ps and `workers` async workers of `config` through `agents-operator local`'s launcher. Its wall time
    includes every process's start-up and the chief's evaluations (which only the chief waits for)."""
    import yaml

    from agents_operator.config import TrainerConfig
    from agents_operator.trainer import rundir

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from local_job_runs import run_job

    before = _job_env_steps(logdir)
    preset = presets.resolve(task).model_dump()
    changed = {name: value for name, value in config.model_dump().items() if value != preset[name]}
    trainer = {TrainerConfig.model_fields[name].alias or name: value for name, value in changed.items()}
    started = time.monotonic()
    outcome = run_job(task, trainer, workers, logdir)
    wall = time.monotonic() - started
    if not outcome.succeeded:
        raise SystemExit(
            f"{task} with {workers} workers in {logdir}: the job ended {outcome.reason}: {outcome.message}"
        )
    after = yaml.safe_load((logdir / rundir.SUMMARY_FILE).read_text())["env_steps"]
    return {"wall_s": round(wall, 1), "evaluation_s": 0.0, "env_steps": after - before, "job_env_steps": after}


def _job_env_steps(logdir: Path) -> int:
    """The env steps of the job's last summary in `logdir` (0 before any): about where a resumed job goes on
    (from its latest checkpoint, at most `checkpoint_every` iterations before)."""
    from agents_operator.trainer.summaries import read_scalars

    points = read_scalars(logdir, "perf/env_steps_per_second") if logdir.exists() else []
    return points[-1][0] if points else 0


def finish(record: dict[str, Any], logdir: Path) -> dict[str, Any]:
    """The run's record with its pieces' times summed, written to RESULT."""
    pieces = [json.loads(line) for line in (logdir / PIECES).read_text().splitlines()]
    training = sum(piece["wall_s"] - piece["evaluation_s"] for piece in pieces)
    trained = sum(piece["env_steps"] for piece in pieces)
    wall = sum(piece.get("process_s", piece["wall_s"]) for piece in pieces)
    # A piece killed before it could record itself leaves steps untimed: its minutes are taken at the
    # rate of the timed pieces (`timed_share` says how much was timed).
    untimed = max(0, record["env_steps"] - trained) / (trained / training) if trained else 0.0
    record = {
        **record,
        "return": record["curve"][-1][1],
        "training_minutes": round((training + untimed) / 60, 2),
        "wall_minutes": round((wall + untimed) / 60, 2),
        "env_steps_per_s": round(trained / training, 1),
        "timed_share": round(min(1.0, trained / record["env_steps"]), 3),
        "pieces": pieces,
    }
    (logdir / RESULT).write_text(json.dumps(record) + "\n")
    return record


def variant_name(variant: dict[str, Any]) -> str:
    """The settings of a variant as one file-name-safe word ("" for the preset itself)."""

    def word(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    return ",".join(f"{key}={word(value)}" for key, value in sorted(variant.items()))


def run_dir(results: Path, task: str, seed: int, steps: int, variant: dict[str, Any] | None = None) -> Path:
    """`results`/<task>-<steps>[+<variant>]/seed<seed>. A name longer than `NAME_LIMIT` bytes keeps its first
    part and ends in a digest of the whole, so that a variant of many settings gets a directory of its own too."""
    name = variant_name(variant or {})
    return results / bounded(f"{task}-{steps}+{name}" if name else f"{task}-{steps}") / f"seed{seed}"


def bounded(name: str) -> str:
    """`name`, or when it is longer than `NAME_LIMIT` bytes its first part ending in a digest of the whole."""
    if len(name.encode()) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{name.encode()[: NAME_LIMIT - DIGEST_CHARS - 1].decode(errors='ignore')}~{digest}"


def ensure_run(
    results: Path, task: str, seed: int, steps: int, variant: dict[str, Any], records: Path | None = None
) -> tuple[dict[str, Any], bool]:
    """The run's record, trained first in a child process unless it is already done (in `results`, or kept in
    `records`, where a run that finishes is kept too); and whether it trained."""
    logdir = run_dir(results, task, seed, steps, variant)
    config = job_config(task, seed, steps, variant)
    _set_aside_if_stale(logdir, config)
    if (logdir / RESULT).exists():
        return _kept(json.loads((logdir / RESULT).read_text()), logdir, records), False
    if records is not None and (record := learning_records.current(records, logdir.parent.name, seed, config)):
        return record, False
    logdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--child", task, str(seed), str(steps), str(logdir), json.dumps(variant)]
    with open(logdir / "train.log", "a") as log:
        child = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=_child_env())
    if child.returncode != 0:
        raise SystemExit(f"{task} seed {seed}: training failed (exit {child.returncode}); see {logdir / 'train.log'}")
    return _kept(finish(json.loads(child.stdout.splitlines()[-1]), logdir), logdir, records), True


def _kept(record: dict[str, Any], logdir: Path, records: Path | None) -> dict[str, Any]:
    """`record`, kept in `records` too (when given)."""
    if records is not None:
        learning_records.keep(records, logdir.parent.name, record, logdir)
    return record


def _set_aside_if_stale(logdir: Path, config) -> None:
    """A run of an earlier version of the preset (its config.yaml differs) is renamed `seedN.stale-<time>`,
    kept but no longer counted, so that the row is trained again with the preset as it is now."""
    from agents_operator.trainer import rundir

    try:
        saved = rundir.load_config(logdir)
    except rundir.UnreadableConfig:
        saved = None  # a run that never got as far as its config: counted as stale too
    if not logdir.exists() or not any(logdir.iterdir()):
        return
    if saved is not None:
        try:
            rundir.check_resume(saved, config)
            return
        except rundir.ConfigConflict:
            pass
    stale = logdir.with_name(f"{logdir.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.rename(stale)
    print(f"{logdir}: trained with other settings than the preset's now; set aside as {stale.name}", file=sys.stderr)


def _child_env() -> dict[str, str]:
    """Small matrices only: threaded BLAS would compete with the environment processes for the cores."""
    quiet = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**quiet, "TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, "PYTHONPATH": str(ROOT)}


def row(task: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One line of the table: a preset (or a variant of it), from its finished runs."""
    ref = reference(task)
    returns = [record["return"] for record in records]
    line: dict[str, Any] = {
        "task": task,
        "env_id": presets.resolve(task).env_id,
        "variant": variant_name(records[0].get("variant") or {}),
        "budget": records[0]["budget"],
        "seeds": sorted(record["seed"] for record in records),
        "mean": round(statistics.fmean(returns), 1),
        "std": round(statistics.pstdev(returns), 1),
        "worst": round(min(returns), 1),
        "training_minutes": round(statistics.fmean(r["training_minutes"] for r in records), 1),
        "wall_minutes": round(statistics.fmean(r.get("wall_minutes", r["training_minutes"]) for r in records), 1),
        "env_steps_per_s": round(statistics.fmean(r["env_steps_per_s"] for r in records), 0),
    }
    if ref.zoo is not None:
        line["zoo"] = ref.zoo
        line["at_or_above_zoo"] = line["mean"] >= ref.zoo
        if ref.locomotion:
            line["worst_at_or_above_floor"] = line["worst"] >= LOCOMOTION_FLOOR * ref.zoo
    if ref.maximum is not None:
        line["maximum"] = ref.maximum
    return line


def markdown(lines: list[dict[str, Any]]) -> str:
    columns = ("preset", "zoo PPO", "ours: mean ± std (seeds)", "worst seed", "env steps", "training min", "wall min")
    head = "| " + " | ".join((*columns, "env steps/s")) + " |"
    table = [head, "|---|---|---|---|---|---|---|---|"]
    for line in lines:
        if "zoo" in line:
            against = f"{line['zoo']:,.1f}"
        elif "maximum" in line:
            against = f"(maximum {line['maximum']:,.0f})"
        else:
            against = "(none)"
        name = f"{line['task']} ({line['env_id']})" + (f", {_label(line['variant'])}" if line["variant"] else "")
        ours = f"{line['mean']:,.1f} ± {line['std']:,.1f} ({len(line['seeds'])})"
        table.append(
            f"| {name} | {against} | {ours} | {line['worst']:,.1f} | {line['budget']:,} "
            f"| {line['training_minutes']} | {line['wall_minutes']} | {line['env_steps_per_s']:,.0f} |"
        )
    return "\n".join(table)


def _label(variant: str) -> str:
    workers = variant.removeprefix(f"{WORKERS}=")
    return f"1 ps + {workers} async workers" if workers != variant else variant


def plot(task: str, records: list[dict[str, Any]], figures: Path) -> Path:
    """Every seed's evaluation curve of `task` on one axis (a variant's dashed), with the zoo's return (or the
    maximum) drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = reference(task)
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for record in sorted(records, key=lambda r: (variant_name(r.get("variant") or {}), r["seed"])):
        steps, returns = zip(*record["curve"], strict=True)
        variant = variant_name(record.get("variant") or {})
        label = f"seed {record['seed']}" + (f", {_label(variant)}" if variant else "")
        axes.plot(steps, returns, label=label, linestyle="--" if variant else "-")
    line = ref.zoo if ref.zoo is not None else ref.maximum
    if line is not None:
        axes.axhline(line, color="black", linestyle=":", label="zoo PPO" if ref.zoo is not None else "maximum")
    axes.set(title=f"{task} ({presets.resolve(task).env_id})", xlabel="env steps", ylabel="evaluation return")
    axes.legend(loc="lower right", fontsize="small")
    figures.mkdir(parents=True, exist_ok=True)
    out = figures / f"{task}.png"
    figure.savefig(out, dpi=80, bbox_inches="tight")
    plt.close(figure)
    return out


def read_doc(doc: Path) -> str:
    """The text of `doc`; SystemExit (one line) when it is missing or has no MARKERS block."""
    if not doc.is_file():
        raise SystemExit(f"{doc}: no such file to write the table into (--doc)")
    text = doc.read_text()
    begin, end = MARKERS
    if begin not in text or end not in text:
        raise SystemExit(f"{doc}: no {begin} ... {end} block to write the table into (--doc)")
    return text


def write_doc(doc: Path, table: str, figures: list[Path], order: list[str]) -> None:
    """The table and the figures' links between MARKERS in `doc`, the rest of it unchanged; the rows of the
    presets in `order` that have no finished run now are kept from the table that was there (`_earlier`)."""
    text = read_doc(doc)
    begin, end = MARKERS
    before, rest = text.split(begin, 1)
    block, after = rest.split(end, 1)
    links = [f"![{path.stem}]({os.path.relpath(path, doc.parent)})" for path in figures]
    rows, links, carried = _earlier(table.splitlines(), links, block.splitlines(), order)
    footnote = f"\n\n{EARLIER_NOTE}" if carried else ""
    doc.write_text(f"{before}{begin}\n" + "\n".join(rows) + footnote + "\n\n" + "\n".join(links) + f"\n{end}{after}")


EARLIER = " *"  # after the preset's name: a row kept from an earlier table
EARLIER_NOTE = (
    f"Rows marked{EARLIER} were trained before finished runs were kept in `docs/learning/records/`, with the "
    "preset as it was then; they stay until their preset is trained again."
)


def _earlier(
    rows: list[str], links: list[str], block: list[str], order: list[str]
) -> tuple[list[str], list[str], bool]:
    """`rows` (a markdown table) and `links` with the rows and links of the earlier table `block` for the tasks
    in `order` that have neither now (marked EARLIER), all in `order`; and whether any row was kept."""

    def task(line: str) -> str:
        return line.removeprefix("| ").removeprefix("![").split(" (")[0].split("]")[0].removesuffix(EARLIER)

    def earlier(line: str) -> str:
        name, rest = line.split(" (", 1)
        return line if name.endswith(EARLIER) else f"{name}{EARLIER} ({rest}"

    now = {task(line) for line in rows[2:]}
    kept = [earlier(line) for line in block if line.startswith("| ") and task(line) in order and task(line) not in now]
    shown = {task(line) for line in links}
    more = [line for line in block if line.startswith("![") and task(line) in order and task(line) not in shown]

    def position(line: str) -> int:
        return order.index(task(line))

    return rows[:2] + sorted(rows[2:] + kept, key=position), sorted(links + more, key=position), bool(kept)


def finished(
    results: Path, task: str, steps: int, variant: dict[str, Any] | None = None, records: Path | None = None
) -> list[dict[str, Any]]:
    """Every finished run of `task` (with `variant`) at `steps` in `results`, whichever invocation trained it;
    given `records`, also every run kept there with the preset as it is now (the runs in `results` are kept
    there too, after a run of an earlier preset is set aside)."""
    variant = variant or {}
    directory = run_dir(results, task, 0, steps, variant).parent
    runs: dict[int, dict[str, Any]] = {}
    for result in sorted(directory.glob(f"seed*/{RESULT}")):
        seed = result.parent.name.removeprefix("seed")
        if not seed.isdigit():
            continue  # a run set aside (seedN.stale-...)
        if records is not None:
            _set_aside_if_stale(result.parent, job_config(task, int(seed), steps, variant))
            if not result.exists():
                continue
        runs[int(seed)] = _kept(json.loads(result.read_text()), result.parent, records)
    for seed in learning_records.seeds(records, directory.name) if records is not None else []:
        config = job_config(task, seed, steps, variant)
        if seed not in runs and (record := learning_records.current(records, directory.name, seed, config)):
            runs[seed] = record
    return [runs[seed] for seed in sorted(runs)]


def write_report(args: argparse.Namespace) -> None:
    """The doc's table and the figures again, from every finished run of the presets themselves and of their
    distributed variants (`--workers`), in `--results` and kept in `--records`."""
    lines, figures = [], []
    order = sorted(presets.names(), key=lambda name: reference(name).budget)
    for task in order:
        steps = args.steps or reference(task).budget
        single = finished(args.results, task, steps, records=args.records)
        counts = _distributed(args.results, task, steps, args.records)
        jobs = [finished(args.results, task, steps, {WORKERS: n}, args.records) for n in counts]
        lines += [row(task, records) for records in (single, *jobs) if records]
        if single or any(jobs):
            figures.append(plot(task, [*single, *(record for records in jobs for record in records)], args.figures))
    write_doc(args.doc, markdown(lines), figures, order)


def _distributed(results: Path, task: str, steps: int, records: Path) -> list[int]:
    """The worker counts of `task`'s distributed runs in `results` and kept in `records`."""
    prefix = f"{task}-{steps}+{WORKERS}="
    found = {path.name.removeprefix(prefix) for where in (results, records) for path in where.glob(f"{prefix}*")}
    return sorted(int(count) for count in found if count.isdigit())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    order = sorted(presets.names(), key=lambda task: reference(task).budget)
    parser.add_argument("--tasks", nargs="+", default=order, choices=presets.names(), help="presets (default all)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="env steps for every run, instead of each task's budget")
    parser.add_argument("--results", type=Path, default=ROOT / "runs" / "learning-table", help="run directories")
    parser.add_argument(
        "--records",
        type=Path,
        default=learning_records.RECORDS,
        help="where the finished runs of the presets are kept (a few kB each, in the repository)",
    )
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "trainer.md", help="where the table goes")
    parser.add_argument("--figures", type=Path, default=ROOT / "docs" / "learning", help="where the PNGs go")
    add_variant_flag(
        parser,
        "a variant of the presets (an ablation): this setting changed, YAML value; repeatable. Its runs have run "
        "directories of their own, and the table and curves say which settings they changed",
    )
    parser.add_argument(
        "--report", action="store_true", help="train nothing: write the doc's table and the PNGs from what is finished"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="train each run as a local job of 1 ps and this many async workers"
    )
    parser.add_argument("--child", nargs="+", metavar="TASK SEED STEPS LOGDIR [VARIANT]", help=argparse.SUPPRESS)
    return parser


def add_variant_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--set KEY=VALUE` (repeatable) into `args.variant`, for `parse_variant`."""
    parser.add_argument("--set", dest="variant", action="append", default=[], metavar="KEY=VALUE", help=help)


def parse_variant(items: list[str], tasks: list[str]) -> dict[str, Any]:
    """`--set` as settings, each checked against every task's preset (SystemExit naming the setting)."""
    from pydantic import ValidationError

    from agents_operator.config import describe
    from agents_operator.trainer import usage
    from agents_operator.trainer.commands import parse_overrides

    try:
        variant = parse_overrides(items)
        for task in tasks:
            presets.resolve(task, variant)
    except usage.UsageError as error:
        raise SystemExit(str(error)) from None
    except ValidationError as error:
        raise SystemExit(f"--set: {describe(error)}") from None
    return variant


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        task, seed, steps, logdir, *variant = args.child  # no variant: from a parent older than --set
        record = train_piece(task, int(seed), int(steps), Path(logdir), json.loads(variant[0] if variant else "{}"))
        print(json.dumps(record))
        return 0
    variant = parse_variant(args.variant, args.tasks)
    if args.steps is not None and args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    documented = not variant  # the doc's table: the presets themselves, alone or distributed
    variant = {**variant, WORKERS: args.workers} if args.workers > 1 else variant
    if documented:
        read_doc(args.doc)  # before hours of training, not after
    if args.report:
        write_report(args)
        return 0
    started, trained, lines = time.monotonic(), [], []
    for task in args.tasks:
        records = []
        for seed in args.seeds:
            steps = args.steps or reference(task).budget
            record, fresh = ensure_run(args.results, task, seed, steps, variant, args.records if documented else None)
            records.append(record)
            trained += [f"{task}/{seed}"] if fresh else []
            if fresh and documented:
                write_report(args)
        lines.append(row(task, records))
    measured = {"trained": trained, "minutes": round((time.monotonic() - started) / 60, 1)}
    print(json.dumps({"measured": measured, "variant": variant_name(variant), "table": lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
