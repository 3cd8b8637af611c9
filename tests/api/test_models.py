"""The AgentsJob model (api/models.py): the defaults of a minimal job, the object's metadata as the API server
reads it, and the trainer config only a parsed job carries."""

import pytest

from agents_operator import presets
from agents_operator.api import AgentsJob, parse_job
from tests.api.cases import manifest, problems


def test_minimal_job_gets_defaults():
    job = parse_job(manifest())
    assert job.spec.run_policy.clean_pod_policy == "Running"
    assert job.spec.run_policy.backoff_limit == 3
    assert job.spec.success_policy == "ChiefWorker"
    assert job.spec.storage.path == "/var/run/agents"
    assert job.spec.replica_specs.counts() == {"ps": 1, "worker": 2, "evaluator": 0}
    assert job.config == presets.resolve("pendulum")


def test_a_job_not_parsed_has_no_trainer_config():
    job = AgentsJob.model_validate(manifest())
    with pytest.raises(ValueError, match=r"not parsed with api\.parse_job"):
        _ = job.config


def test_a_null_label_or_annotation_is_the_empty_string_as_the_api_server_decodes_it():
    data = manifest()
    data["metadata"].update(labels={"team": None}, annotations={"note": None})
    job = parse_job(data)
    assert (job.metadata.labels, job.metadata.annotations) == ({"team": ""}, {"note": ""})


def test_the_namespace_must_be_a_dns_label():
    data = manifest()
    data["metadata"]["namespace"] = "Bad_NS"
    assert any(p.startswith("metadata.namespace: String should match pattern") for p in problems(data))


def test_job_labels_must_be_label_values():
    data = manifest()
    data["metadata"]["labels"] = {"team": "a b"}
    assert any(p.startswith("metadata.labels: 'team': String should match pattern") for p in problems(data))


def test_replica_counts_and_types_in_order():
    specs = parse_job(manifest(replicaSpecs={"worker": {"replicas": 3}, "ps": {"replicas": 2}})).spec.replica_specs
    assert specs.counts() == {"ps": 2, "worker": 3, "evaluator": 0}
    assert [replica_type for replica_type, _ in specs.items()] == ["ps", "worker"]


def test_every_child_type_has_a_restart_policy():
    data = manifest(environments={"placement": "remote", "server": {"restartPolicy": "Never"}})
    data["spec"]["replicaSpecs"]["worker"]["restartPolicy"] = "ExitCode"
    spec = parse_job(data).spec
    assert [spec.restart_policy(t) for t in ("ps", "worker", "envserver")] == ["OnFailure", "ExitCode", "Never"]


@pytest.mark.parametrize(("placement", "outside"), [("colocated", False), ("sidecar", True), ("remote", True)])
def test_environments_outside_the_worker(placement, outside):
    assert parse_job(manifest(environments={"placement": placement})).spec.environments.outside is outside
