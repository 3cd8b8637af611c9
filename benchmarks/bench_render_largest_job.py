"""Rendering the largest valid job (999 ps + 999 workers); one JSON line.

- build_s: `render.children` (best of `--repeats`), the objects the operator creates;
- yaml_s: writing them all as YAML (`manifests.dump_all`, libyaml's emitter where PyYAML has it), once;
- pure_vs_c: how many times slower PyYAML's Python emitter is than the one used, measured on the first
  `--sample` objects spread evenly over the list, and yaml_pure_s_estimated from it;
- yaml_mb: the size of that YAML. The job's cluster is in one ConfigMap, not in every pod's TF_CONFIG
  (docs/scaling.md, "Membership, once per job", has the figures before and after).
The issue's target is yaml_mb < 10 and build_s + yaml_s < 2 on the build machine.

    .venv/bin/python benchmarks/bench_render_largest_job.py
"""

from __future__ import annotations

import argparse
import json
import time

from agents_operator import manifests, naming, render
from agents_operator.api import parse_job


def largest_job() -> dict:
    replicas = {"replicas": naming.MAX_REPLICAS}
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": "a" * naming.MAX_JOB_NAME_LENGTH, "namespace": "research"},
        "spec": {"trainer": {"preset": "pendulum"}, "replicaSpecs": {"ps": replicas, "worker": replicas}},
    }


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sample", type=int, default=40, help="objects dumped with both emitters")
    args = parser.parse_args()
    job = parse_job(largest_job())
    builds = [timed(render.children, job) for _ in range(args.repeats)]
    children = builds[-1][0]
    text, yaml_s = timed(manifests.dump_all, children)
    sample = children[:: max(1, len(children) // args.sample)]
    _, sample_c = timed(manifests.dump_all, sample)
    _, sample_pure = timed(manifests.dump_all, sample, manifests.PureDumper)
    ratio = sample_pure / sample_c
    report = {
        "objects": len(children),
        "build_s": round(min(s for _, s in builds), 3),
        "yaml_s": round(yaml_s, 2),
        "yaml_mb": round(len(text.encode()) / 2**20, 1),
        "c_emitter": manifests.Dumper is not manifests.PureDumper,
        "pure_vs_c": round(ratio, 1),
        "yaml_pure_s_estimated": round(yaml_s * ratio, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
