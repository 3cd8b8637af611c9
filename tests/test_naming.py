"""Child names, labels and their limits (naming.py)."""

import pytest

import agents_operator
from agents_operator import naming
from agents_operator.api import parse_job
from tests.api.cases import with_value


def test_name_of_exactly_the_limit_is_accepted():
    name = "a" * naming.MAX_JOB_NAME_LENGTH
    parse_job(with_value("metadata.name", name))
    for child_type in naming.CHILD_TYPES:
        assert len(naming.child_name(name, child_type, naming.MAX_REPLICAS - 1)) <= naming.DNS_LABEL_MAX
    assert len(naming.child_name(name, naming.ENV_SERVER, naming.MAX_REPLICAS - 1)) == naming.DNS_LABEL_MAX


def test_a_replicas_labels_name_its_slot_and_select_only_its_pod():
    labels = naming.replica_labels("pj", naming.WORKER, 3)
    assert naming.parse_child(labels) == (naming.WORKER, 3)
    assert naming.job_selector("pj").items() <= labels.items()
    assert naming.child_name("pj", naming.WORKER, 3) == "pj-worker-3"


@pytest.mark.parametrize(
    "labels",
    [
        None,
        {},
        {naming.LABEL_TYPE: "driver", naming.LABEL_INDEX: "0"},
        {naming.LABEL_TYPE: naming.PS, naming.LABEL_INDEX: "-1"},
        {naming.LABEL_TYPE: naming.PS, naming.LABEL_INDEX: "zero"},
        {naming.LABEL_TYPE: naming.PS},
    ],
)
def test_labels_that_are_not_a_replicas_name_no_slot(labels):
    assert naming.parse_child(labels) is None


def test_the_other_children_are_named_after_the_job():
    assert naming.tensorboard_name("pj") == "pj-tensorboard" and naming.network_policy_name("pj") == "pj-replicas"
    name = "a" * naming.MAX_JOB_NAME_LENGTH
    assert len(naming.tensorboard_name(name)) <= naming.DNS_LABEL_MAX
    assert len(naming.network_policy_name(name)) <= naming.DNS_LABEL_MAX


@pytest.mark.parametrize(
    ("replica_type", "names", "index"),
    [
        (naming.WORKER, ["setup", naming.TRAINER_CONTAINER], 1),
        (naming.WORKER, ["mine", "other"], 0),  # a template's own names: the first runs the program
        (naming.ENV_SERVER, ["proxy", naming.ENV_SERVER_CONTAINER], 1),
        (naming.ENV_SERVER, [naming.TRAINER_CONTAINER, "x"], 0),
    ],
)
def test_the_main_container_is_the_one_named_for_the_child_type_else_the_first(replica_type, names, index):
    assert naming.main_index(names, replica_type) == index


def test_images_are_tagged_with_the_package_version():
    assert naming.image(naming.TRAINER_IMAGE) == f"{naming.TRAINER_IMAGE}:{agents_operator.__version__}"
