"""What the operator, the trainer and the client agree on (contract.py): the metric names the trainer serves,
the condition types the CRD allows, and their lookup in a status as the API server returns it."""

import pytest
from prometheus_client import generate_latest

from agents_operator import contract, crd

STATUS = {
    "conditions": [
        {"type": "Created", "status": "True", "reason": "JobCreated"},
        {"type": "Running", "status": "False", "reason": "JobSucceeded"},
        {"type": "Succeeded", "status": "True", "reason": "ChiefSucceeded"},
    ]
}


@pytest.mark.parametrize(("type_", "true"), [("Created", True), ("Running", False), ("Succeeded", True)])
def test_a_condition_is_found_by_type_and_true_only_when_it_says_so(type_, true):
    assert contract.find_condition(STATUS, type_)["type"] == type_
    assert contract.condition_true(STATUS, type_) is true


@pytest.mark.parametrize("job_status", [None, {}, {"conditions": None}, {"conditions": []}, STATUS])
def test_a_condition_that_is_not_there_is_none_and_not_true(job_status):
    assert contract.find_condition(job_status, "Failed") is None
    assert not contract.condition_true(job_status, "Failed")


def test_the_crd_allows_exactly_the_condition_types():
    conditions = crd.openapi_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["items"]["properties"]["type"]["enum"] == list(contract.CONDITION_TYPES)


def test_the_trainer_serves_every_metric_named_here():
    from agents_operator.trainer.metrics import Metrics

    names = [value for key, value in vars(contract).items() if key.startswith("METRIC_") and key != "METRIC_PREFIX"]
    metrics = Metrics(port=0)
    try:
        served = generate_latest(metrics.registry).decode()
    finally:
        metrics.close()
    assert all(name.startswith(contract.METRIC_PREFIX) for name in names)
    assert [name for name in names if f"\n{name} " not in f"\n{served}"] == []
