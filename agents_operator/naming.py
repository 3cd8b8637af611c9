"""Names, labels and selectors of an AgentsJob and its children.

Child names are deterministic (`<job>-<type>-<index>`) so that every create is idempotent and a restarted
operator finds what it made before. Pure module.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents_operator import __version__

GROUP = "agents.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AgentsJob"
# Image repositories, tagged with the package version: the operator's (`agents-operator run`) and the one job
# pods run by default (Dockerfile targets operator and trainer; `make image` builds both).
OPERATOR_IMAGE = "agents-operator"
TRAINER_IMAGE = "agents-operator-trainer"


def image(repository: str) -> str:
    """`repository:VERSION`: the tag `make image` builds, and what the chart, deploy/ and render default to."""
    return f"{repository}:{__version__}"


PLURAL = "agentsjobs"
SINGULAR = "agentsjob"
SHORT_NAMES = ("aj",)

PS = "ps"
WORKER = "worker"
EVALUATOR = "evaluator"
REPLICA_TYPES = (PS, WORKER, EVALUATOR)
ENV_SERVER = "envserver"
"""Env-server pods of a `remote` placement: children like replicas, but not in spec.replicaSpecs."""
CHILD_TYPES = (*REPLICA_TYPES, ENV_SERVER)

TRAINER_CONTAINER = "agents"
ENV_SERVER_CONTAINER = "env-server"

LABEL_JOB = f"{GROUP}/job-name"
LABEL_TYPE = f"{GROUP}/replica-type"
LABEL_INDEX = f"{GROUP}/replica-index"
LABEL_ROLE = f"{GROUP}/job-role"
LABEL_COMPONENT = f"{GROUP}/component"
ROLE_CHIEF = "chief"

MAX_REPLICAS = 999
"""Upper bound of any replica count (env servers included): indices stay within three digits."""

DNS_LABEL_MAX = 63
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""Service names must be DNS-1035 labels, so job names must be too (they start every child name)."""

DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""Namespace names."""

LABEL_VALUE_MAX = 63
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value: empty, or alphanumerics with '-', '_', '.' inside."""

_DNS_SUBDOMAIN_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
QUALIFIED_NAME = rf"^{_DNS_SUBDOMAIN_PREFIX}[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
"""A label or annotation key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
QUALIFIED_NAME_MAX = 253 + 1 + 63

TENSORBOARD_SUFFIX = "-tensorboard"
NETWORK_POLICY_SUFFIX = "-replicas"
CLUSTER_SUFFIX = "-cluster"


def _longest_suffix() -> int:
    index = str(MAX_REPLICAS - 1)
    suffixes = [f"-{t}-{index}" for t in CHILD_TYPES] + [TENSORBOARD_SUFFIX, NETWORK_POLICY_SUFFIX, CLUSTER_SUFFIX]
    return max(len(s) for s in suffixes)


MAX_JOB_NAME_LENGTH = DNS_LABEL_MAX - _longest_suffix()
"""The longest job name whose every child name is still a valid DNS label (49)."""


def child_name(job: str, replica_type: str, index: int) -> str:
    """Name of the pod and of its headless Service: `<job>-<type>-<index>`."""
    return f"{job}-{replica_type}-{index}"


def tensorboard_name(job: str) -> str:
    return f"{job}{TENSORBOARD_SUFFIX}"


def network_policy_name(job: str) -> str:
    return f"{job}{NETWORK_POLICY_SUFFIX}"


def cluster_config_name(job: str) -> str:
    """The job's ConfigMap, which holds its cluster (`tfconfig.CLUSTER_KEY`)."""
    return f"{job}{CLUSTER_SUFFIX}"


def job_selector(job: str) -> dict[str, str]:
    """Labels shared by every child of the job."""
    return {LABEL_JOB: job}


def type_selector(job: str, replica_type: str) -> str:
    """The label selector, as a string, of every pod of one replica type of the job (the scale subresource's for
    the workers: what an HPA averages its pod metrics over)."""
    return f"{LABEL_JOB}={job},{LABEL_TYPE}={replica_type}"


def replica_labels(job: str, replica_type: str, index: int) -> dict[str, str]:
    """Labels of one replica's pod; its Service selects on exactly these (the pod of the chief also has
    LABEL_ROLE: ROLE_CHIEF)."""
    return {LABEL_JOB: job, LABEL_TYPE: replica_type, LABEL_INDEX: str(index)}


def main_container(replica_type: str) -> str:
    """The name of the container that runs a child's own program: the env server in an env-server pod, the
    trainer in any other."""
    return ENV_SERVER_CONTAINER if replica_type == ENV_SERVER else TRAINER_CONTAINER


def main_index(names: Sequence[str | None], replica_type: str) -> int:
    """Which of a pod's containers (by name, in order) runs its program: the one `main_container` names, else
    the first (a template may name its containers as it likes)."""
    name = main_container(replica_type)
    return names.index(name) if name in names else 0


def parse_child(labels: dict[str, str] | None) -> tuple[str, int] | None:
    """(replica type, index) of a child from its labels, or None when they are not ours or malformed."""
    labels = labels or {}
    replica_type, index = labels.get(LABEL_TYPE), labels.get(LABEL_INDEX, "")
    if replica_type not in CHILD_TYPES or not index.isdigit():
        return None
    return replica_type, int(index)
