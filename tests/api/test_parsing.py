"""`api.parse_job` (api/parsing.py): a manifest to a parsed job with its trainer config resolved once, or every
problem at once, each one line naming the field and the reason."""

import copy

import pytest

from agents_operator import presets, render
from agents_operator.api import parse_job
from tests.api.cases import (
    BAD,
    INTEGRAL_FLOATS,
    bad_id,
    bad_manifest,
    manifest,
    problems,
    with_value,
)


def test_overrides_apply_on_top_of_the_preset():
    job = parse_job(manifest(trainer={"preset": "hopper", "learningRate": 1e-4, "maxGradNorm": None}))
    cfg = job.config
    assert cfg.env_id == "HopperBulletEnv-v0"
    assert cfg.learning_rate == 1e-4
    assert cfg.max_grad_norm is None  # explicit null disables clipping
    assert cfg.epochs == presets.load("hopper")["epochs"]


def test_trainer_config_is_resolved_once_per_parse(monkeypatch):
    calls = []
    resolve = presets.resolve
    monkeypatch.setattr(presets, "resolve", lambda *a: calls.append(a) or resolve(*a))
    job = parse_job(manifest(trainer={"preset": "hopper", "learningRate": 1e-4}))
    render.children(job)
    assert calls == [("hopper", {"learning_rate": 1e-4})]
    assert job.config is job.config and job.topology.config is job.config


@pytest.mark.parametrize("bad", BAD, ids=bad_id)
def test_bad_input_names_the_field_and_reason(bad):
    found = problems(bad_manifest(bad))
    assert any(p.startswith(f"{bad.field}: ") and bad.reason in p for p in found), found


def test_every_problem_is_reported_at_once():
    data = with_value("metadata.name", "X" * 60)
    data["spec"]["trainer"]["preset"] = "walrus"
    data["spec"]["replicaSpecs"].pop("ps")
    found = problems(data)
    assert len(found) == 4, found  # two name rules, ps required, preset


def test_an_integral_float_is_the_integer_as_json_reads_it():
    job = parse_job(copy.deepcopy(INTEGRAL_FLOATS))
    assert job.spec.replica_specs.counts()["worker"] == 2 and job.config.epochs == 3


def test_a_value_echoed_in_a_problem_stays_on_one_line():
    data = with_value("apiVersion", "agents.dev/v1alpha1\nkind: Pod")
    assert problems(data) == [
        "apiVersion: expected apiVersion agents.dev/v1alpha1 and kind AgentsJob, got 'agents.dev/v1alpha1\\nkind: Pod' "
        "'AgentsJob'"
    ]


def test_not_a_mapping():
    assert problems(["a"]) == ["expected a mapping (an AgentsJob object), got list"]
