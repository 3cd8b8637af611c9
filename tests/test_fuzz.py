"""Hostile values anywhere in a manifest, and hostile text: validate, parse_job and render may only ever end
in a clean verdict (a valid job that renders, or one line per problem naming a field), never a traceback."""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stderr, redirect_stdout

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_operator import api, cli, manifests, render
from agents_operator.api import InvalidJob, parse_job
from tests.api.cases import manifest

TEMPLATE = "spec.replicaSpecs.worker.template"
PATHS = [
    "apiVersion",
    "kind",
    "metadata",
    "metadata.name",
    "metadata.labels",
    "metadata.labels.team",
    "spec",
    "spec.trainer",
    *(f"spec.trainer.{info.alias or name}" for name, info in api.TrainerSpec.model_fields.items()),
    "spec.replicaSpecs",
    "spec.replicaSpecs.ps",
    "spec.replicaSpecs.worker.replicas",
    "spec.replicaSpecs.worker.restartPolicy",
    "spec.replicaSpecs.evaluator",
    TEMPLATE,
    f"{TEMPLATE}.metadata",
    f"{TEMPLATE}.metadata.labels",
    f"{TEMPLATE}.spec",
    f"{TEMPLATE}.spec.containers",
    f"{TEMPLATE}.spec.initContainers",
    f"{TEMPLATE}.spec.volumes",
    "spec.runPolicy",
    "spec.runPolicy.backoffLimit",
    "spec.runPolicy.activeDeadlineSeconds",
    "spec.runPolicy.suspend",
    "spec.storage",
    "spec.storage.path",
    "spec.storage.persistentVolumeClaim",
    "spec.tensorboard",
    "spec.successPolicy",
    "spec.environments",
    "spec.environments.placement",
    "spec.environments.port",
    "spec.environments.serversPerWorker",
    "spec.environments.server",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**80),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["", "/", "..", "a\n", "sidecar", "remote", "pendulum", "agents", "2222", "9090"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["name", "image", "replicas", "env", "ports", "spec", "x"]), inner, max_size=3),
    ),
    max_leaves=6,
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["agents", "side", "Bad", ""])},
        optional={"image": values, "env": values, "ports": values, "volumeMounts": values},
    ),
    max_size=3,
)


def _set(data: dict, path: str, value) -> None:
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _verdict(data) -> None:
    """parse_job either names problems, each one line with a field, or accepts a job that renders."""
    try:
        job = parse_job(copy.deepcopy(data))
    except InvalidJob as err:
        assert err.problems
        for problem in err.problems:
            assert "\n" not in str(problem) and problem.reason.strip(), problem
        return
    manifests.dump_all(render.children(job))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3), containers)
def test_hostile_values_anywhere_end_in_a_clean_verdict(changes, pod_containers):
    data = manifest()
    if pod_containers:
        _set(data, TEMPLATE, {"spec": {"containers": pod_containers}})
    for path, value in changes:
        _set(data, path, value)
    _verdict(data)


fragments = st.sampled_from(
    [
        *("\n", ": ", "- ", "&a ", "*a ", "{", "}", "[", "]", "!!int ", "!!binary ", "'", '"', "\t", "%YAML 1.1\n"),
        "---\n",
        "9" * 5000,
        "2001-02-30",
        ".inf",
        ".nan",
        "~",
        "<<: *a\n",
        "kind: AgentsJob\n",
        "\x00",
        "\ufeff",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(fragments, st.text(max_size=8)), max_size=12), st.integers(0, 40))
def test_hostile_text_is_one_line_per_problem_from_validate(tmp_path_factory, parts, cut):
    good = yaml.safe_dump(manifest(), sort_keys=False)
    path = tmp_path_factory.mktemp("fuzz") / "job.yaml"
    path.write_text(good[: len(good) * cut // 40] + "".join(parts) + good[len(good) * cut // 40 :], encoding="utf-8")
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli.main(["validate", "--quiet", str(path)])
    assert code in (0, 1)
    for line in err.getvalue().splitlines():
        assert line.startswith(str(path)), line
