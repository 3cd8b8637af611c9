"""The mirror of the pod template (api/podtemplate.py): what a user sets is kept as given, the fields Pod
Security "restricted" constrains are modelled under their Kubernetes names, and what the render edits is typed."""

import pytest
from pydantic import ValidationError

from agents_operator import podsecurity
from agents_operator.api import PodTemplate
from agents_operator.api.podtemplate import Volume

TEMPLATE = {
    "metadata": {"labels": {"team": "rl"}, "annotations": {"note": "x"}},
    "spec": {
        "nodeSelector": {"pool": "cpu"},
        "hostPID": True,
        "securityContext": {"runAsUser": 0, "fsGroup": 7, "sysctls": [{"name": "net.ipv4.ping_group_range"}]},
        "containers": [
            {
                "name": "agents",
                "command": ["python", "-m", "mine"],
                "securityContext": {"allowPrivilegeEscalation": True, "capabilities": {"add": ["NET_ADMIN"]}},
                "ports": [{"containerPort": 80, "hostPort": 80}],
            }
        ],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "cfg", "configMap": {"name": "c"}}],
    },
}


def test_what_a_user_sets_is_kept_as_given():
    assert PodTemplate.model_validate(TEMPLATE).model_dump(by_alias=True, exclude_none=True) == TEMPLATE


def test_the_fields_restricted_constrains_are_modelled():
    spec = PodTemplate.model_validate(TEMPLATE).spec
    assert spec.host_pid is True and spec.security_context.run_as_user == 0
    assert spec.security_context.sysctls[0].name == "net.ipv4.ping_group_range"
    (container,) = spec.containers
    assert container.security_context.allow_privilege_escalation is True
    assert container.security_context.capabilities.add == ["NET_ADMIN"]
    assert container.ports[0].host_port == 80
    assert spec.volumes[0].hostPath == {"path": "/"} and spec.volumes[1].hostPath is None


def test_a_volume_names_every_node_bound_type():
    assert set(podsecurity.NODE_VOLUME_TYPES) <= set(Volume.model_fields)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"containers": []}, "at least 1 item"),
        ({"containers": [{"name": "Agents"}]}, "String should match pattern"),
        ({"containers": [{"name": "agents", "env": {"A": "1"}}]}, "Input should be a valid list"),
        ({"containers": [{"name": "agents"}], "volumes": [{"hostPath": {"path": "/"}}]}, "Field required"),
    ],
    ids=["no container", "a name that is no DNS label", "env not a list", "a volume without a name"],
)
def test_what_the_render_edits_must_have_its_kubernetes_shape(spec, reason):
    with pytest.raises(ValidationError, match=reason):
        PodTemplate.model_validate({"spec": spec})
