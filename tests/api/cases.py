"""AgentsJob manifests for the API's tests, and the tables of bad ones: `BAD` (each with the field named and
what is said, and whether the API server refuses it too: tests/e2e/test_api_server.py sends every row to a real
one), `ESCALATIONS` (what a Restricted job's templates may not say), `IMMUTABLE` (what a job may not change)."""

from dataclasses import dataclass
from typing import Any

import pytest

from agents_operator import api
from agents_operator.api import InvalidJob, parse_job


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


def with_value(path: str, value):
    data = manifest()
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value
    return data


class Deleted:
    """The value of a `Bad` row whose field is removed; its repr is stable, so test ids are too."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = Deleted()


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


def elastic_spec(*, ps: bool = True, workers: int = 2, **elastic) -> dict:
    """The spec of `manifest()` as an elastic job (trainer.mode async, spec.elastic as given, 4 workers at most
    unless said)."""
    replicas: dict = {"worker": {"replicas": workers}, **({"ps": {"replicas": 1}} if ps else {})}
    bounds = {"maxWorkers": 4, **elastic}
    return {"trainer": {"preset": "pendulum", "mode": "async"}, "replicaSpecs": replicas, "elastic": bounds}


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
    Bad("spec.replicaSpecs.worker", DELETE, "spec.replicaSpecs.worker", "Field required"),
    Bad("spec.replicaSpecs.ps", DELETE, "spec.replicaSpecs.ps", "replicaSpecs.ps is required"),
    Bad("spec", elastic_spec(minWorkers=3, maxWorkers=2), "spec.elastic.minWorkers", "at most elastic.maxWorkers"),
    Bad("spec", elastic_spec(maxWorkers=1), "spec.replicaSpecs.worker.replicas", "must lie within elastic.minWorkers"),
    Bad("spec", elastic_spec(minWorkers=3, maxWorkers=4), "spec.replicaSpecs.worker.replicas", "must lie within"),
    Bad("spec", elastic_spec(ps=False, workers=1), "spec.replicaSpecs.ps", "elastic.maxWorkers above 1 needs"),
    Bad(
        "spec",
        {**elastic_spec(workers=3, minWorkers=2), "trainer": {"preset": "pendulum", "backupWorkers": 2}},
        "spec.trainer.backupWorkers",
        "must be less than elastic.minWorkers",
    ),
    Bad("spec.trainer.backupWorkers", 2, "spec.trainer.backupWorkers", "must be less than replicaSpecs.worker"),
    Bad("spec.trainer.backupWorkers", -1, "spec.trainer.backupWorkers", "greater than or equal to 0"),
    Bad("spec.elastic", {"minWorkers": 0, "maxWorkers": 4}, "spec.elastic.minWorkers", "greater than or equal to 1"),
    Bad("spec.elastic", {"minWorkers": 1}, "spec.elastic.maxWorkers", "Field required"),
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
    Bad("spec.trainer.explorationHold", 4, "spec.trainer", "exploration_hold (4) holds gSDE's", only_validate=PRESET),
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
    Bad("spec", DELETE, "spec", "Field required"),
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
    return with_value(bad.path, bad.value)


INTEGRAL_FLOATS = manifest(
    trainer={"preset": "pendulum", "epochs": 3.0},
    replicaSpecs={"ps": {"replicas": 1.0}, "worker": {"replicas": 2.0}},
)

"""Accepted by validate and by the API server as kubectl sends it (YAML's 2.0 as JSON's 2; tests/e2e)."""


IMMUTABLE = [
    # (path, value, the field named, what is said about it)
    ("spec.trainer.learningRate", 0.1, "spec.trainer", "trainer is immutable"),
    ("spec.replicaSpecs.worker.replicas", 3, "spec.replicaSpecs", "replica counts are immutable"),
    ("spec.replicaSpecs.ps", DELETE, "spec.replicaSpecs", "replica counts are immutable"),
    ("spec.storage", {"persistentVolumeClaim": {"claimName": "c"}}, "spec.storage", "storage is immutable"),
    ("spec.successPolicy", "AllWorkers", "spec.successPolicy", "successPolicy is immutable"),
    ("spec.environments", {"placement": "sidecar"}, "spec.environments", "environments is immutable"),
]


@dataclass(frozen=True)
class Update:
    """An update of an elastic job (`elastic_spec()` before); `field` and `reason` say why it is refused, or are
    empty: it is taken."""

    name: str
    spec: dict
    field: str = ""
    reason: str = ""


ELASTIC_UPDATES = [
    Update("scale-up", elastic_spec(workers=4)),
    Update("scale-down", elastic_spec(workers=1)),
    Update("past-max", elastic_spec(workers=5), "spec.replicaSpecs.worker.replicas", "must lie within"),
    Update("bounds", elastic_spec(maxWorkers=6), "spec.elastic", "elastic is immutable"),
    Update("not-elastic", {**elastic_spec(), "elastic": DELETE}, "spec.elastic", "elastic is immutable"),
    Update(
        "ps",
        elastic_spec() | {"replicaSpecs": {"ps": {"replicas": 2}, "worker": {"replicas": 2}}},
        "spec.replicaSpecs",
        "replica counts are immutable",
    ),
]


def elastic_manifest(spec: dict) -> dict:
    """`manifest()` with `spec` (an entry DELETE is left out)."""
    return {**manifest(), "spec": {key: value for key, value in spec.items() if value is not DELETE}}


def changed(path: str, value) -> dict:
    """`manifest()` with one immutable field changed (and otherwise valid as a new object)."""
    new = with_value(path, value)
    if path == "spec.replicaSpecs.ps":
        new["spec"]["replicaSpecs"]["worker"]["replicas"] = 1
    return new


def schema_valid(data: dict) -> bool:
    """Whether the schema part holds: the API server runs CEL rules only on objects that pass it."""
    try:
        api.AgentsJob.model_validate(data, strict=True)
    except ValueError:
        return False
    return True
