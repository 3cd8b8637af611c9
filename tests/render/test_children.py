"""Everything a job renders to, in order (render/children.py): pinned per example, valid Kubernetes objects;
TensorBoard and the NetworkPolicy."""

import os

import kubernetes_validate
import pytest

from agents_operator import manifests, naming, render
from tests.render.examples import EXAMPLES, ROOT, UID, load


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path):
    """What render makes of each example is pinned; set UPDATE_GOLDEN=1 to rewrite after a deliberate change."""
    rendered = manifests.dump_all(render.children(load(path)))
    golden = ROOT / "tests" / "golden" / f"{path.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_children_are_valid_kubernetes_objects(path):
    for obj in render.children(load(path)):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_non_pod_children_are_the_children_but_the_pods(path):
    job = load(path)
    assert render.non_pod_children(job) == [c for c in render.children(job) if c["kind"] != "Pod"]


def test_tensorboard_only_when_enabled():
    assert render.tensorboard(load(ROOT / "examples" / "pendulum.yaml")) == []
    job = load(ROOT / "examples" / "bullet-ant.yaml")
    deployment, service, _policy = render.tensorboard(job)
    assert deployment["metadata"]["name"] == "bullet-ant-tensorboard"
    assert service["spec"]["ports"][0]["targetPort"] == render.TENSORBOARD_PORT
    assert render.tensorboard_url(job) == "http://bullet-ant-tensorboard.research.svc"


def test_network_policy_opens_the_grpc_port_to_the_jobs_own_replicas_only():
    job = load(ROOT / "examples" / "pendulum.yaml")
    policy = render.network_policy(job)
    selector = policy["spec"]["podSelector"]
    assert selector["matchLabels"] == {naming.LABEL_JOB: "pendulum"}
    assert selector["matchExpressions"] == [{"key": naming.LABEL_TYPE, "operator": "Exists"}]
    (grpc,) = policy["spec"]["ingress"]  # the metrics port: see tests/test_podsecurity.py
    assert grpc["from"] == [{"podSelector": selector}]
    assert grpc["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID
    assert render.children(job)[0] == policy
    tensorboard = render.tensorboard(load(ROOT / "examples" / "bullet-ant.yaml"))[0]
    assert naming.LABEL_TYPE not in tensorboard["spec"]["template"]["metadata"]["labels"]
