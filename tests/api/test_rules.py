"""The cross-field rules (api/rules.py): Pod Security for Restricted jobs' templates, the child index limit,
immutable sections; and each rule's CEL and its Python twin, held to the same verdict."""

import copy

import pytest

from agents_operator import api, naming
from agents_operator.api import parse_job
from tests.api.cases import (
    BAD,
    ELASTIC_UPDATES,
    ESCALATIONS,
    IMMUTABLE,
    bad_manifest,
    changed,
    elastic_manifest,
    elastic_spec,
    manifest,
    problems,
    schema_valid,
    with_value,
)
from tests.crdtools import cel_verdict, parsed


@pytest.mark.parametrize(("pod_spec", "_field", "_reason"), ESCALATIONS, ids=lambda v: str(v)[:40])
def test_privileged_jobs_may_escalate(pod_spec, _field, _reason):
    data = with_value("spec.replicaSpecs.worker.template", {"spec": pod_spec})
    data["spec"]["podSecurity"] = "Privileged"
    assert parse_job(data).spec.pod_security == "Privileged"


def test_restricted_templates_may_say_what_restricted_allows():
    allowed = {
        "securityContext": {"runAsUser": 4242, "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
        "volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "s", "emptyDir": {}}],
        "initContainers": [{"name": "setup", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}],
        "containers": [
            {"name": "agents", "securityContext": {"seLinuxOptions": {"type": "container_t", "level": "s0"}}},
            {"name": "extra", "ports": [{"containerPort": 80, "hostPort": 0}]},
        ],
    }
    job = parse_job(with_value("spec.replicaSpecs.worker.template", {"spec": allowed}))
    assert job.spec.pod_security == "Restricted"


def test_remote_placement_is_bounded_by_the_child_index_limit():
    data = manifest(environments={"placement": "remote", "serversPerWorker": 8})
    data["spec"]["replicaSpecs"]["worker"]["replicas"] = 125
    assert any("at most 999" in p for p in problems(data))
    data["spec"]["replicaSpecs"]["worker"]["replicas"] = 124
    job = parse_job(data)  # 992 servers
    assert job.spec.restart_policy(naming.ENV_SERVER) == "OnFailure"
    assert job.spec.restart_policy(naming.WORKER) == "OnFailure"


@pytest.mark.parametrize(("path", "value", "field", "reason"), IMMUTABLE)
def test_immutable_fields(path, value, field, reason):
    new = changed(path, value)
    assert any(p.startswith(f"{field}: {reason}") for p in problems(new, manifest()))
    parse_job(new)  # the same manifest is fine as a new object


def test_mutable_fields_may_change():
    old = manifest()
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"] = {"suspend": True, "backoffLimit": 9, "ttlSecondsAfterFinished": 5}
    new["spec"]["replicaSpecs"]["worker"]["template"] = {"spec": {"containers": [{"name": "agents", "image": "x"}]}}
    parse_job(new, old)


@pytest.mark.parametrize("update", ELASTIC_UPDATES, ids=lambda u: u.name)
def test_an_elastic_job_changes_its_worker_count_and_nothing_else(update):
    old, new = elastic_manifest(elastic_spec()), elastic_manifest(update.spec)
    if not update.field:
        assert (
            parse_job(new, old).spec.replica_specs.worker.replicas == update.spec["replicaSpecs"]["worker"]["replicas"]
        )
        return
    assert any(p.startswith(f"{update.field}: ") and update.reason in p for p in problems(new, old))


# The CRD's CEL rules and the Python checks are one rule each, written twice: they must agree.

CASES = [manifest()] + [bad_manifest(b) for b in BAD if not b.not_json and schema_valid(bad_manifest(b))]


@pytest.mark.parametrize("rule", [r for r in api.RULES if not r.transition], ids=lambda r: r.cel[:50])
@pytest.mark.parametrize("data", CASES)
def test_cel_rules_agree_with_python(rule, data):
    verdict = cel_verdict(rule, data)
    if verdict is not None:
        assert verdict == rule.check(parsed(data), None)


@pytest.mark.parametrize("rule", [r for r in api.RULES if r.transition], ids=lambda r: r.cel[:50])
@pytest.mark.parametrize(("path", "value", "_field", "_reason"), IMMUTABLE)
def test_cel_transition_rules_agree_with_python(rule, path, value, _field, _reason):
    old, new = manifest(), changed(path, value)
    for pair in ((new, old), (old, old)):
        verdict = cel_verdict(rule, *pair)
        if verdict is not None:
            assert verdict == rule.check(*map(parsed, pair))


@pytest.mark.parametrize("rule", [r for r in api.RULES if r.transition], ids=lambda r: r.cel[:50])
@pytest.mark.parametrize("update", ELASTIC_UPDATES, ids=lambda u: u.name)
def test_cel_transition_rules_agree_with_python_on_elastic_updates(rule, update):
    old, new = elastic_manifest(elastic_spec()), elastic_manifest(update.spec)
    verdict = cel_verdict(rule, new, old)
    if verdict is not None:
        assert verdict == rule.check(parsed(new), parsed(old))
