import copy
from dataclasses import dataclass
from typing import Any

import pytest

from agents_operator import api, naming, presets, render
from agents_operator.api import AgentsJob, InvalidJob, parse_job
from tests.crdtools import cel_verdict, parsed


def manifest(**spec_changes) -> dict:
    spec = {
        "trainer": {"preset": "pendulum"},
        "replicaSpecs": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
    }
    spec.update(spec_changes)
    return {"apiVersion": "agents.dev/v1alpha1", "kind": "AgentsJob", "metadata": {"name": "demo"}, "spec": spec}


def problems(data, old=None) -> list[str]:
    with pytest.raises(InvalidJob) as err:
        parse_job(data, old)
    return [str(p) for p in err.value.problems]


def test_minimal_job_gets_defaults():
    job = parse_job(manifest())
    assert job.spec.run_policy.clean_pod_policy == "Running"
    assert job.spec.run_policy.backoff_limit == 3
    assert job.spec.success_policy == "ChiefWorker"
    assert job.spec.storage.path == "/var/run/agents"
    assert job.spec.replica_specs.counts() == {"ps": 1, "worker": 2, "evaluator": 0}
    assert job.config == presets.resolve("pendulum")


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


def test_a_job_not_parsed_has_no_trainer_config():
    job = AgentsJob.model_validate(manifest())
    with pytest.raises(ValueError, match=r"not parsed with api\.parse_job"):
        _ = job.config


def _with(path: str, value):
    data = manifest()
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value
    return data


class _Deleted:
    """The value of a `Bad` row whose field is removed; its repr is stable, so test ids are too."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Deleted()


@dataclass(frozen=True)
class Bad:
    """A bad manifest (`path` set to `value` in a good one), and the problem `validate` reports."""

    path: str
    value: Any
    field: str
    """The field named by `validate` and, unless `only_validate`, by the API server."""
    reason: str
    """A fragment of what `validate` says about it."""
    only_validate: str = ""
    """Why the API server cannot judge it (it accepts the manifest); empty: it refuses it too (tests/e2e)."""
    unknown_resource: bool = False
    """The manifest names a kind or version the API server does not serve: refused before any field is read."""
    not_json: bool = False
    """YAML can say it (.inf, .nan) but JSON cannot: it never reaches the API server."""


WORKER_POD = "spec.replicaSpecs.worker.template.spec"
CONTAINER_RULE = "containers[*].securityContext: privileged, allowPrivilegeEscalation"
POD_RULE = "runAsNonRoot false, runAsUser 0"


def _escalating(**security_context) -> dict:
    return {"containers": [{"name": "agents", "securityContext": security_context}]}


ESCALATIONS = [
    # (a pod spec that breaks Pod Security "restricted", the field named, what is said about it)
    ({"hostNetwork": True, "containers": [{"name": "agents"}]}, "hostNetwork", "hostNetwork must be unset or false"),
    ({"hostPID": True, "containers": [{"name": "agents"}]}, "hostPID", "hostPID must be unset or false"),
    ({"hostIPC": True, "containers": [{"name": "agents"}]}, "hostIPC", "hostIPC must be unset or false"),
    (
        {"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "containers": [{"name": "agents"}]},
        "volumes",
        "hostPath and the other node-bound volume types are not allowed",
    ),
    (
        {"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "containers": [{"name": "agents"}]},
        "volumes",
        "node-bound volume types",
    ),
    ({"securityContext": {"runAsUser": 0}, "containers": [{"name": "agents"}]}, "securityContext", POD_RULE),
    ({"securityContext": {"runAsNonRoot": False}, "containers": [{"name": "agents"}]}, "securityContext", POD_RULE),
    (
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "agents"}]},
        "securityContext",
        POD_RULE,
    ),
    (
        {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "containers": [{"name": "a"}]},
        "securityContext",
        "sysctls outside the safe set",
    ),
    (
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}, "containers": [{"name": "agents"}]},
        "securityContext",
        POD_RULE,
    ),
    (_escalating(privileged=True), "containers", CONTAINER_RULE),
    (_escalating(allowPrivilegeEscalation=True), "containers", CONTAINER_RULE),
    (_escalating(runAsUser=0), "containers", CONTAINER_RULE),
    (_escalating(runAsNonRoot=False), "containers", CONTAINER_RULE),
    (_escalating(capabilities={"add": ["SYS_ADMIN"]}), "containers", CONTAINER_RULE),
    (_escalating(seccompProfile={"type": "Unconfined"}), "containers", CONTAINER_RULE),
    (_escalating(appArmorProfile={"type": "Unconfined"}), "containers", CONTAINER_RULE),
    (_escalating(procMount="Unmasked"), "containers", CONTAINER_RULE),
    (_escalating(seLinuxOptions={"user": "system_u"}), "containers", CONTAINER_RULE),
    (_escalating(windowsOptions={"hostProcess": True}), "containers", CONTAINER_RULE),
    (
        {"containers": [{"name": "agents", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
        "containers",
        "containers[*].ports[*].hostPort must be unset or 0",
    ),
    (
        {"initContainers": [{"name": "setup", "securityContext": {"privileged": True}}], "containers": [{"name": "a"}]},
        "initContainers",
        "initContainers[*].securityContext: privileged",
    ),
    (
        {
            "initContainers": [{"name": "setup", "ports": [{"containerPort": 1, "hostPort": 1}]}],
            "containers": [{"name": "a"}],
        },
        "initContainers",
        "initContainers[*].ports[*].hostPort",
    ),
]
"""What a Restricted job's templates may not say (each is accepted with spec.podSecurity Privileged)."""


def _template(container: dict | None = None, **pod) -> dict:
    """A worker pod template whose trainer container (or pod spec) carries the given fields."""
    return {"spec": {"containers": [{"name": "agents", **(container or {})}], **pod}}


WORKER_TEMPLATE = "spec.replicaSpecs.worker.template"
CONTAINER = f"{WORKER_TEMPLATE}.spec.containers[0]"
PRESET = "the CRD cannot see presets (they live in the trainer image): the resolved trainer config is checked here"
BAD = [
    Bad("spec.replicaSpecs.worker.replicas", 0, "spec.replicaSpecs.worker.replicas", "Input should be greater than"),
    Bad("spec.replicaSpecs.worker.replicas", -3, "spec.replicaSpecs.worker.replicas", "Input should be greater than"),
    Bad("spec.replicaSpecs.ps.replicas", 1000, "spec.replicaSpecs.ps.replicas", "Input should be less than"),
    Bad("spec.replicaSpecs.worker", _DELETE, "spec.replicaSpecs.worker", "Field required"),
    Bad("spec.replicaSpecs.ps", _DELETE, "spec.replicaSpecs.ps", "replicaSpecs.ps is required"),
    Bad("spec.replicaSpecs.evaluator", {"replicas": 2}, "spec.replicaSpecs.evaluator.replicas", "must be 1"),
    Bad("spec.replicaSpecs.evaluator", {}, "spec.replicaSpecs.evaluator", "replicaSpecs.evaluator needs storage"),
    Bad(
        "spec.replicaSpecs.worker.restartPolicy",
        "Sometimes",
        "spec.replicaSpecs.worker.restartPolicy",
        "must be one of",
    ),
    Bad(
        "spec.replicaSpecs.worker.template",
        {"spec": {}},
        "spec.replicaSpecs.worker.template.spec.containers",
        "Field required",
    ),
    Bad(
        "spec.replicaSpecs.worker.template",
        {"spec": {"containers": []}},
        "spec.replicaSpecs.worker.template.spec.containers",
        "List should",
    ),
    Bad(
        "spec.replicaSpecs.worker.template",
        {"metadata": {}},
        "spec.replicaSpecs.worker.template.spec",
        "Field required",
    ),
    Bad(
        "spec.replicaSpecs.worker.template",
        {"spec": {"containers": [{"image": "x"}]}},
        "spec.replicaSpecs.worker.template.spec.containers[0].name",
        "Field required",
    ),
    Bad("spec.trainer.preset", "walrus", "spec.trainer.preset", "unknown preset 'walrus'", only_validate=PRESET),
    Bad("spec.trainer.learningRate", "fast", "spec.trainer.learningRate", "Input should be a valid number"),
    Bad("spec.trainer.epochs", 2.5, "spec.trainer.epochs", "Input should be a valid integer"),
    Bad("spec.trainer.discount", 1.5, "spec.trainer.discount", "Input should be less than or equal to 1"),
    Bad("spec.trainer.mode", "eventually", "spec.trainer.mode", "must be one of"),
    Bad("spec.trainer.minibatches", 7, "spec.trainer", "minibatches (7) must divide", only_validate=PRESET),
    Bad("spec.trainer.learning_rat", 1.0, "spec.trainer.learning_rat", "unknown field"),
    Bad("spec.replicas", 3, "spec.replicas", "unknown field"),
    Bad("spec.runPolicy.cleanPodPolicy", "Some", "spec.runPolicy.cleanPodPolicy", "must be one of"),
    Bad("spec.runPolicy.backoffLimit", -1, "spec.runPolicy.backoffLimit", "Input should be greater than or equal to 0"),
    Bad("spec.runPolicy.activeDeadlineSeconds", 0, "spec.runPolicy.activeDeadlineSeconds", "Input should be greater"),
    Bad("spec.storage", {"emptyDir": {}, "persistentVolumeClaim": {"claimName": "c"}}, "spec.storage", "storage: set"),
    Bad("spec.storage.path", "relative/dir", "spec.storage.path", "String should match pattern"),
    Bad("spec.tensorboard", {"enabled": True}, "spec.tensorboard.enabled", "tensorboard.enabled needs"),
    Bad("metadata.name", "a" * 50, "metadata.name", "metadata.name must be at most 49 characters"),
    Bad("metadata.name", "9lives", "metadata.name", "metadata.name must be a DNS-1035 label"),
    Bad("metadata.name", "Upper", "metadata.name", "metadata.name must be a DNS-1035 label"),
    Bad("spec.environments.placement", "elsewhere", "spec.environments.placement", "must be one of"),
    Bad("spec.environments.mode", "batch", "spec.environments.mode", "must be one of"),
    Bad("spec.environments.port", 80, "spec.environments.port", "Input should be greater than or equal to 1024"),
    Bad("spec.environments.port", 2222, "spec.environments.port", "environments.port must differ from the TensorFlow"),
    Bad(
        "spec.environments",
        {"placement": "sidecar", "port": 9090},
        "spec.trainer.metricsPort",
        "the preset's 9090: trainer.metricsPort must differ",
        only_validate=PRESET,
    ),
    Bad(
        "spec.environments",
        {"serversPerWorker": 2},
        "spec.environments.serversPerWorker",
        "applies to placement remote only",
    ),
    Bad("spec.environments.serversPerWorker", 65, "spec.environments.serversPerWorker", "Input should be less than"),
    Bad(
        "spec.environments",
        {"placement": "remote", "serversPerWorker": 64},
        "spec.environments.serversPerWorker",
        "64 servers cannot split envsPerWorker 8",
        only_validate=PRESET,
    ),
    Bad(
        "spec.environments",
        {"placement": "sidecar", "server": {"template": {"spec": {"containers": [{"name": "env-server"}]}}}},
        "spec.environments.server.template",
        "environments.server.template applies to placement remote only",
    ),
    Bad("spec.environments.server.restartPolicy", "Sometimes", "spec.environments.server.restartPolicy", "must be one"),
    Bad("spec.environments.server.image", 7, "spec.environments.server.image", "Input should be a valid string"),
    Bad("spec.environments.server.cpu", "2", "spec.environments.server.cpu", "unknown field"),
    *(
        Bad("spec.replicaSpecs.worker.template", {"spec": pod_spec}, f"{WORKER_POD}.{field}", reason)
        for pod_spec, field, reason in ESCALATIONS
    ),
    Bad(
        "spec.environments",
        {"placement": "remote", "server": {"template": {"spec": {"hostPID": True, "containers": [{"name": "e"}]}}}},
        "spec.environments.server.template.spec.hostPID",
        "hostPID must be unset or false under spec.podSecurity Restricted",
    ),
    Bad("spec.podSecurity", "Baseline", "spec.podSecurity", "must be one of"),
    Bad("spec", _DELETE, "spec", "Field required"),
    # Hostile input: wrong types, non-finite numbers, names and paths that would break a child object.
    Bad("spec.trainer.learningRate", float("inf"), "spec.trainer.learningRate", "finite number", not_json=True),
    Bad("spec.trainer.discount", float("nan"), "spec.trainer.discount", "finite number", not_json=True),
    Bad(
        WORKER_TEMPLATE,
        _template({"resources": {"limits": {"cpu": float("inf")}}}),
        f"{CONTAINER}.resources.limits.cpu",
        "not a finite number",
        not_json=True,
    ),
    Bad(WORKER_TEMPLATE, _template({"args": [b"\x00"]}), f"{CONTAINER}.args[0]", "bytes has no JSON", not_json=True),
    Bad("metadata.labels", {"bad key!": "x"}, "metadata.labels", "'bad key!': key: String should match pattern"),
    Bad("metadata.labels", {"team": "a b"}, "metadata.labels", "'team': String should match pattern"),
    Bad("metadata.annotations", {"a/b/c": "x"}, "metadata.annotations", "'a/b/c': key: String should match pattern"),
    Bad("spec.trainer.epochs", True, "spec.trainer.epochs", "Input should be a valid integer"),
    Bad("spec.trainer.epochs", "3", "spec.trainer.epochs", "Input should be a valid integer"),
    Bad("spec.trainer.learningRate", "1e-3", "spec.trainer.learningRate", "Input should be a valid number"),
    Bad("spec.trainer.policyLayers", "64,64", "spec.trainer.policyLayers", "Input should be a valid list"),
    Bad("spec.trainer", "pendulum", "spec.trainer", "Input should be a valid dictionary"),
    Bad("spec.runPolicy.suspend", "yes", "spec.runPolicy.suspend", "Input should be a valid boolean"),
    Bad("spec.runPolicy.backoffLimit", 2**70, "spec.runPolicy.backoffLimit", "Input should be less than"),
    Bad("spec.replicaSpecs", [], "spec.replicaSpecs", "Input should be a valid dictionary"),
    Bad("spec.replicaSpecs.worker.replicas", "2", "spec.replicaSpecs.worker.replicas", "valid integer"),
    Bad("metadata.name", "demo\n", "metadata.name", "metadata.name must be a DNS-1035 label"),
    Bad("metadata.name", "demo-", "metadata.name", "metadata.name must be a DNS-1035 label"),
    Bad("spec.storage.path", "/", "spec.storage.path", "String should match pattern"),
    Bad("spec.storage.path", "/runs/../etc", "spec.storage.path", "String should match pattern"),
    Bad("spec.storage.path", "/runs//x", "spec.storage.path", "String should match pattern"),
    Bad("spec.storage.path", "/my runs", "spec.storage.path", "String should match pattern"),
    Bad("spec.storage.path", "/" + "a" * 600, "spec.storage.path", "at most 512 characters"),
    Bad(
        "spec.storage.persistentVolumeClaim",
        {"claimName": 3},
        "spec.storage.persistentVolumeClaim.claimName",
        "valid string",
    ),
    Bad(WORKER_TEMPLATE, _template({"ports": "not-a-list"}), f"{CONTAINER}.ports", "Input should be a valid list"),
    Bad(WORKER_TEMPLATE, _template({"env": "A=1"}), f"{CONTAINER}.env", "Input should be a valid list"),
    Bad(WORKER_TEMPLATE, _template({"env": ["A=1"]}), f"{CONTAINER}.env[0]", "valid dictionary"),
    Bad(WORKER_TEMPLATE, _template({"volumeMounts": 5}), f"{CONTAINER}.volumeMounts", "Input should be a valid list"),
    Bad(WORKER_TEMPLATE, _template({"image": 5}), f"{CONTAINER}.image", "Input should be a valid string"),
    Bad(
        WORKER_TEMPLATE,
        {"spec": {"containers": [{"name": "Agents"}]}},
        f"{CONTAINER}.name",
        "String should match pattern",
    ),
    Bad(WORKER_TEMPLATE, _template(volumes="x"), f"{WORKER_TEMPLATE}.spec.volumes", "Input should be a valid list"),
    Bad(WORKER_TEMPLATE, _template(initContainers={}), f"{WORKER_TEMPLATE}.spec.initContainers", "valid list"),
    Bad(WORKER_TEMPLATE, {"metadata": "x", **_template()}, f"{WORKER_TEMPLATE}.metadata", "valid dictionary"),
    Bad(
        WORKER_TEMPLATE,
        {"metadata": {"labels": {"team": "a b"}}, **_template()},
        f"{WORKER_TEMPLATE}.metadata.labels.team",
        "String should match pattern",
    ),
    Bad(
        WORKER_TEMPLATE,
        {"metadata": {"labels": {"team": "x" * 64}}, **_template()},
        f"{WORKER_TEMPLATE}.metadata.labels.team",
        "at most 63 characters",
    ),
    Bad(
        WORKER_TEMPLATE,
        {"metadata": {"annotations": {"note": 1}}, **_template()},
        f"{WORKER_TEMPLATE}.metadata.annotations.note",
        "Input should be a valid string",
    ),
    Bad("spec.trainer", {"preset": "pendulum", "metricsPort": 2222}, "spec.trainer.metricsPort", "must differ"),
    Bad(
        "spec",
        {
            "trainer": {"preset": "pendulum", "metricsPort": 7000},
            "replicaSpecs": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
            "environments": {"placement": "remote", "port": 7000},
        },
        "spec.trainer.metricsPort",
        "from environments.port",
    ),
    Bad("spec.environments.port", 65536, "spec.environments.port", "Input should be less than or equal to 65535"),
    Bad("kind", "TFJob", "kind", "expected apiVersion agents.dev/v1alpha1 and kind AgentsJob", unknown_resource=True),
    Bad("apiVersion", "agents.dev/v1", "apiVersion", "expected apiVersion agents.dev/v1alpha1", unknown_resource=True),
]


def bad_id(bad: Bad) -> str:
    return f"{bad.path}={bad.value!r}"[:60]


def bad_manifest(bad: Bad) -> dict:
    return _with(bad.path, bad.value)


@pytest.mark.parametrize("bad", BAD, ids=bad_id)
def test_bad_input_names_the_field_and_reason(bad):
    found = problems(bad_manifest(bad))
    assert any(p.startswith(f"{bad.field}: ") and bad.reason in p for p in found), found


@pytest.mark.parametrize(("pod_spec", "_field", "_reason"), ESCALATIONS, ids=lambda v: str(v)[:40])
def test_privileged_jobs_may_escalate(pod_spec, _field, _reason):
    data = _with("spec.replicaSpecs.worker.template", {"spec": pod_spec})
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
    assert parse_job(_with("spec.replicaSpecs.worker.template", {"spec": allowed})).spec.pod_security == "Restricted"


def test_every_problem_is_reported_at_once():
    data = _with("metadata.name", "X" * 60)
    data["spec"]["trainer"]["preset"] = "walrus"
    data["spec"]["replicaSpecs"].pop("ps")
    found = problems(data)
    assert len(found) == 4, found  # two name rules, ps required, preset


def test_a_null_the_schema_does_not_allow_is_dropped_as_the_api_server_does():
    job = parse_job(manifest(trainer={"preset": "hopper", "epochs": None}, runPolicy=None))
    assert job.config.epochs == presets.load("hopper")["epochs"]
    assert job.spec.run_policy.backoff_limit == 3


INTEGRAL_FLOATS = manifest(
    trainer={"preset": "pendulum", "epochs": 3.0},
    replicaSpecs={"ps": {"replicas": 1.0}, "worker": {"replicas": 2.0}},
)
"""Accepted by the API server: JSON has one number type (tests/e2e sends it too)."""


def test_an_integral_float_is_the_integer_as_json_reads_it():
    job = parse_job(copy.deepcopy(INTEGRAL_FLOATS))
    assert job.spec.replica_specs.counts()["worker"] == 2 and job.config.epochs == 3


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


def test_a_value_echoed_in_a_problem_stays_on_one_line():
    data = _with("apiVersion", "agents.dev/v1alpha1\nkind: Pod")
    assert problems(data) == [
        "apiVersion: expected apiVersion agents.dev/v1alpha1 and kind AgentsJob, got 'agents.dev/v1alpha1\\nkind: Pod' "
        "'AgentsJob'"
    ]


def test_not_a_mapping():
    assert problems(["a"]) == ["expected a mapping (an AgentsJob object), got list"]


def test_remote_placement_is_bounded_by_the_child_index_limit():
    data = manifest(environments={"placement": "remote", "serversPerWorker": 8})
    data["spec"]["replicaSpecs"]["worker"]["replicas"] = 125
    assert any("at most 999" in p for p in problems(data))
    data["spec"]["replicaSpecs"]["worker"]["replicas"] = 124
    job = parse_job(data)  # 992 servers
    assert job.spec.restart_policy(naming.ENV_SERVER) == "OnFailure"
    assert job.spec.restart_policy(naming.WORKER) == "OnFailure"


def test_name_of_exactly_the_limit_is_accepted():
    name = "a" * naming.MAX_JOB_NAME_LENGTH
    parse_job(_with("metadata.name", name))
    for child_type in naming.CHILD_TYPES:
        assert len(naming.child_name(name, child_type, naming.MAX_REPLICAS - 1)) <= naming.DNS_LABEL_MAX
    assert len(naming.child_name(name, naming.ENV_SERVER, naming.MAX_REPLICAS - 1)) == naming.DNS_LABEL_MAX


IMMUTABLE = [
    # (path, value, the field named, what is said about it)
    ("spec.trainer.learningRate", 0.1, "spec.trainer", "trainer is immutable"),
    ("spec.replicaSpecs.worker.replicas", 3, "spec.replicaSpecs", "replica counts are immutable"),
    ("spec.replicaSpecs.ps", _DELETE, "spec.replicaSpecs", "replica counts are immutable"),
    ("spec.storage", {"persistentVolumeClaim": {"claimName": "c"}}, "spec.storage", "storage is immutable"),
    ("spec.successPolicy", "AllWorkers", "spec.successPolicy", "successPolicy is immutable"),
    ("spec.environments", {"placement": "sidecar"}, "spec.environments", "environments is immutable"),
]


def changed(path: str, value) -> dict:
    """`manifest()` with one immutable field changed (and otherwise valid as a new object)."""
    new = _with(path, value)
    if path == "spec.replicaSpecs.ps":
        new["spec"]["replicaSpecs"]["worker"]["replicas"] = 1
    return new


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


# The CRD's CEL rules and the Python checks are one rule each, written twice: they must agree.


def schema_valid(data: dict) -> bool:
    """Whether the schema part holds: the API server runs CEL rules only on objects that pass it."""
    try:
        api.AgentsJob.model_validate(data, strict=True)
    except ValueError:
        return False
    return True


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
