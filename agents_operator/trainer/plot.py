"""Learning curves from the summaries of one or more runs, on one chart (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

from agents_operator.trainer import rundir
from agents_operator.trainer.summaries import read_scalars


def plot(logdirs: list[Path], out: Path, tag: str) -> dict[str, int]:
    """Draw `tag` against environment steps for every run; returns the number of points per run.

    Raises ValueError when no run has any point of `tag`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    counts = {}
    for logdir in logdirs:
        points = read_scalars(logdir, tag)
        counts[str(logdir)] = len(points)
        if not points:
            continue
        config = rundir.load_config(logdir)
        label = f"{Path(logdir).name} ({config.env_id})" if config else Path(logdir).name
        steps, values = zip(*points, strict=True)
        axes.plot(steps, values, label=label)
    if not any(counts.values()):
        plt.close(figure)
        raise ValueError(f"no {tag!r} summaries in {', '.join(map(str, logdirs))}")
    axes.set_xlabel("environment steps")
    axes.set_ylabel(tag)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return counts
