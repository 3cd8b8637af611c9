"""Generated manifests: validate either accepts them (and then render works) or names a problem."""

import copy
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_operator import api, naming, presets, render
from agents_operator.api import InvalidJob, parse_job
from tests.api.cases import ESCALATIONS, schema_valid
from tests.crdtools import cel_verdict, parsed
from tests.test_podsecurity import violations

DNS = re.compile(naming.DNS_1035_LABEL)

names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,60}[a-z0-9]", fullmatch=True),
    st.text(min_size=0, max_size=70),
)
replicas = st.one_of(st.integers(-2, 1001), st.none(), st.text(max_size=3))
replica = st.fixed_dictionaries(
    {},
    optional={
        "replicas": replicas,
        "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never", "ExitCode", "Sometimes"]),
        "template": st.one_of(
            st.just({"spec": {"containers": [{"name": "agents"}]}}),
            st.just({"spec": {"containers": []}}),
            st.just({"spec": {}}),
            st.just({"spec": {"containers": [{"name": "agents", "image": "x"}, {"name": "side"}]}}),
            st.sampled_from([{"spec": pod_spec} for pod_spec, _, _ in ESCALATIONS]),
        ),
    },
)
override_values = {
    "learningRate": st.one_of(st.floats(-1, 2, allow_nan=False), st.text(max_size=3)),
    "epochs": st.one_of(st.integers(-1, 2000), st.floats(0, 10, allow_nan=False)),
    "minibatches": st.integers(1, 64),
    "envsPerWorker": st.integers(0, 20),
    "discount": st.floats(-0.5, 1.5, allow_nan=False),
    "mode": st.sampled_from(["sync", "async", "later"]),
    "maxGradNorm": st.one_of(st.none(), st.floats(-1, 5, allow_nan=False)),
    "policyLayers": st.lists(st.integers(-1, 5000), max_size=10),
    "bogusKey": st.integers(),
}
trainer = st.fixed_dictionaries(
    {"preset": st.sampled_from([*presets.names(), "walrus", ""])},
    optional=override_values,
)
spec = st.fixed_dictionaries(
    {"replicaSpecs": st.fixed_dictionaries({"worker": replica}, optional={"ps": replica, "evaluator": replica})},
    optional={
        "trainer": trainer,
        "runPolicy": st.fixed_dictionaries(
            {},
            optional={
                "cleanPodPolicy": st.sampled_from(["All", "Running", "None", "Some"]),
                "backoffLimit": st.integers(-2, 20),
                "suspend": st.booleans(),
                "activeDeadlineSeconds": st.integers(-1, 100),
            },
        ),
        "storage": st.sampled_from(
            [{}, {"emptyDir": {}}, {"persistentVolumeClaim": {"claimName": "c"}}, {"path": "rel"}]
        ),
        "tensorboard": st.fixed_dictionaries({"enabled": st.booleans()}),
        "successPolicy": st.sampled_from(["ChiefWorker", "AllWorkers", "Anyone"]),
        "podSecurity": st.sampled_from(["Restricted", "Privileged", "Baseline"]),
        "environments": st.fixed_dictionaries(
            {},
            optional={
                "placement": st.sampled_from(["colocated", "sidecar", "remote", "mars"]),
                "mode": st.sampled_from(["step", "rollout", "fast"]),
                "serversPerWorker": st.integers(0, 70),
                "port": st.sampled_from([50051, 2222, 9090, 80, 70000]),
                "server": st.fixed_dictionaries(
                    {},
                    optional={
                        "image": st.sampled_from(["sim:1", ""]),
                        "restartPolicy": st.sampled_from(["Never", "Always", "Sometimes"]),
                        "template": st.sampled_from(
                            [{"spec": {"containers": [{"name": "env-server"}]}}, {"spec": {"containers": []}}]
                        ),
                    },
                ),
            },
        ),
    },
)
jobs = st.builds(
    lambda name, spec: {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": name},
        "spec": spec,
    },
    names,
    spec,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs)
def test_validate_accepts_and_renders_or_names_a_problem(data):
    try:
        job = parse_job(copy.deepcopy(data))
    except InvalidJob as err:
        assert err.problems
        for problem in err.problems:
            assert problem.reason.strip()
            assert problem.field.split(".")[0] in ("metadata", "spec", "kind", "apiVersion")
        return
    children = render.children(job)
    counts = job.spec.replica_specs.counts()
    servers = job.topology.remote_servers
    assert sum(1 for c in children if c["kind"] == "Pod") == sum(counts.values()) + servers
    if job.spec.environments.placement == "remote":
        per_worker = job.spec.environments.servers_per_worker
        assert servers == counts["worker"] * per_worker + counts["evaluator"]
    for child in children:
        assert DNS.match(child["metadata"]["name"]) and len(child["metadata"]["name"]) <= 63
        if child["kind"] == "Pod" and job.spec.pod_security == "Restricted":
            assert violations(child["spec"]) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs)
def test_cel_rules_agree_with_python_on_generated_jobs(data):
    if not schema_valid(data):  # the schema part must hold for the API server to reach CEL
        return
    for rule in api.RULES:
        verdict = cel_verdict(rule, data)
        if verdict is not None:
            assert verdict == rule.check(parsed(data), None), rule.cel
