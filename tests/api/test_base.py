"""What every model is made of (api/base.py): our models speak camelCase, refuse unknown fields and what JSON
cannot say, and drop a null where the schema admits none (as the API server does, so the default applies); a
Kubernetes object keeps what we do not model; storage paths are named segments."""

import re

import pytest
from pydantic import ValidationError

from agents_operator import presets
from agents_operator.api import parse_job
from agents_operator.api.base import STORAGE_PATH, CamelModel, KubeModel
from tests.api.cases import manifest


def test_a_null_the_schema_does_not_allow_is_dropped_as_the_api_server_does():
    job = parse_job(manifest(trainer={"preset": "hopper", "epochs": None}, runPolicy=None))
    assert job.config.epochs == presets.load("hopper")["epochs"]
    assert job.spec.run_policy.backoff_limit == 3


class Section(CamelModel):
    """One of our models, as small as it gets: a defaulted field and a nullable one."""

    backoff_limit: int = 3
    active_deadline_seconds: int | None = 7


def test_our_models_speak_camel_case_and_read_either_name():
    assert Section.model_validate({"backoffLimit": 5}).backoff_limit == 5
    assert Section.model_validate({"backoff_limit": 5}).backoff_limit == 5
    assert Section().model_dump(by_alias=True) == {"backoffLimit": 3, "activeDeadlineSeconds": 7}


def test_a_null_is_dropped_only_where_the_field_admits_none():
    assert Section.model_validate({"backoffLimit": None}).backoff_limit == 3  # pruned: the default applies
    assert Section.model_validate({"activeDeadlineSeconds": None}).active_deadline_seconds is None  # kept


@pytest.mark.parametrize(
    ("data", "reason"),
    [({"backofLimit": 1}, "Extra inputs are not permitted"), ({"backoffLimit": float("inf")}, "finite number")],
)
def test_our_models_refuse_unknown_fields_and_what_json_cannot_say(data, reason):
    with pytest.raises(ValidationError, match=reason):
        Section.model_validate(data)


def test_a_kubernetes_object_keeps_the_fields_we_do_not_model():
    class Partial(KubeModel):
        name: str

    given = {"name": "a", "terminationMessagePath": "/dev/log", "tty": True}
    assert Partial.model_validate(given).model_dump() == given


@pytest.mark.parametrize("path", ["/var/run/agents", "/runs/.hidden", "/runs/..x", "/a/b-c_d"])
def test_storage_paths_of_named_segments_match(path):
    assert re.match(STORAGE_PATH, path)


@pytest.mark.parametrize("path", ["/", "relative", "/runs/", "/runs//x", "/runs/../etc", "/runs/./x", "/my runs"])
def test_storage_paths_that_would_hide_the_image_or_leave_the_volume_do_not(path):
    assert not re.match(STORAGE_PATH, path)
