"""Pod Security Standard "restricted": what a pod template may say, as CEL and Python side by side, and what
render forces into every pod and container. Pure module.

The controls follow https://kubernetes.io/docs/concepts/security/pod-security-standards (baseline and
restricted): no host namespaces, host ports, hostPath or other node-bound volume types, privileged or
host-process containers; capabilities drop ALL and add only NET_BIND_SERVICE; no privilege escalation;
runAsNonRoot, never UID 0; seccomp RuntimeDefault or Localhost; default /proc mount; only the safe sysctls;
only the container SELinux types and the default AppArmor profiles.

`CHECKS` is what `api` turns into one CRD rule (and its Python twin) per pod template and check; `restrict_pod_spec`
is what render does to every pod of a Restricted job, whatever its template says (validate refused the rest).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

PodSecurity = Literal["Restricted", "Privileged"]
RESTRICTED: PodSecurity = "Restricted"
PRIVILEGED: PodSecurity = "Privileged"

ALLOWED_CAPABILITY = "NET_BIND_SERVICE"
PROFILE_TYPES = ("RuntimeDefault", "Localhost")
"""Seccomp and AppArmor profile types restricted allows (Unconfined is the escalation)."""
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
DEFAULT_PROC_MOUNT = "Default"
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
NODE_VOLUME_TYPES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "photonPersistentDisk",
)
"""Volume types outside restricted's list (configMap, csi, downwardAPI, emptyDir, ephemeral,
persistentVolumeClaim, projected, secret). The pod template models each, so that CEL can see it."""
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_LISTS = ("containers", "initContainers")
"""Containers a template may have (ephemeral containers cannot be created with a pod)."""

POD_DEFAULTS: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_DEFAULTS: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


# --- what a template may say: CEL over `{s}` (the template's pod spec) and the same in Python ---------------


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _cel_context(sc: str) -> str:
    """CEL: the (pod or container) security context `sc` keeps restricted, in the fields both kinds have."""
    opt = f"!has({sc}."
    return (
        f"({opt}runAsNonRoot) || {sc}.runAsNonRoot) && ({opt}runAsUser) || {sc}.runAsUser != 0) && "
        f"({opt}seccompProfile) || !has({sc}.seccompProfile.type) || "
        f"{sc}.seccompProfile.type in {_cel_list(PROFILE_TYPES)}) && "
        f"({opt}appArmorProfile) || !has({sc}.appArmorProfile.type) || "
        f"{sc}.appArmorProfile.type in {_cel_list(PROFILE_TYPES)}) && "
        f"({opt}seLinuxOptions) || ((!has({sc}.seLinuxOptions.type) || {sc}.seLinuxOptions.type in "
        f"{_cel_list(SELINUX_TYPES)}) && !has({sc}.seLinuxOptions.user) && !has({sc}.seLinuxOptions.role))) && "
        f"({opt}windowsOptions) || !has({sc}.windowsOptions.hostProcess) || !{sc}.windowsOptions.hostProcess)"
    )


def _context_ok(sc: dict) -> bool:
    """Python twin of `_cel_context`."""
    selinux, windows = sc.get("seLinuxOptions"), sc.get("windowsOptions")
    return (
        sc.get("runAsNonRoot") is not False
        and sc.get("runAsUser") != 0
        and (sc.get("seccompProfile") or {}).get("type") in (None, *PROFILE_TYPES)
        and (sc.get("appArmorProfile") or {}).get("type") in (None, *PROFILE_TYPES)
        and (
            selinux is None
            or (selinux.get("type") in (None, *SELINUX_TYPES) and "user" not in selinux and "role" not in selinux)
        )
        and (windows is None or not windows.get("hostProcess"))
    )


def _cel_container(c: str) -> str:
    sc = f"{c}.securityContext"
    return (
        f"!has({sc}) || ((!has({sc}.privileged) || !{sc}.privileged) && "
        f"(!has({sc}.allowPrivilegeEscalation) || !{sc}.allowPrivilegeEscalation) && "
        f"(!has({sc}.capabilities) || !has({sc}.capabilities.add) || "
        f"{sc}.capabilities.add.all(x, x == '{ALLOWED_CAPABILITY}')) && "
        f"(!has({sc}.procMount) || {sc}.procMount == '{DEFAULT_PROC_MOUNT}') && {_cel_context(sc)})"
    )


def _container_ok(container: dict) -> bool:
    """Python twin of `_cel_container`."""
    sc = container.get("securityContext")
    if sc is None:
        return True
    add = (sc.get("capabilities") or {}).get("add") or []
    return (
        not sc.get("privileged")
        and not sc.get("allowPrivilegeEscalation")
        and all(cap == ALLOWED_CAPABILITY for cap in add)
        and sc.get("procMount") in (None, DEFAULT_PROC_MOUNT)
        and _context_ok(sc)
    )


@dataclass(frozen=True)
class Check:
    """One restricted control on a pod spec: `field` (relative to it) is what a refusal names."""

    field: str
    message: str
    cel: str
    """CEL with `{s}` standing for the pod spec."""
    check: Callable[[dict], bool]


def _host_namespace(name: str) -> Check:
    return Check(
        name, f"{name} must be unset or false", f"!has({{s}}.{name}) || !{{s}}.{name}", lambda s: not s.get(name)
    )


def _containers(lst: str) -> list[Check]:
    return [
        Check(
            lst,
            f"{lst}[*].securityContext: privileged, allowPrivilegeEscalation, capabilities.add other than "
            f"{ALLOWED_CAPABILITY}, runAsNonRoot false, runAsUser 0, seccomp or AppArmor other than "
            "RuntimeDefault/Localhost, procMount, SELinux user/role/type and hostProcess are not allowed",
            f"!has({{s}}.{lst}) || {{s}}.{lst}.all(c, {_cel_container('c')})",
            lambda s: all(_container_ok(c) for c in s.get(lst) or []),
        ),
        Check(
            lst,
            f"{lst}[*].ports[*].hostPort must be unset or 0",
            f"!has({{s}}.{lst}) || {{s}}.{lst}.all(c, !has(c.ports) || "
            "c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
            lambda s: all(not p.get("hostPort") for c in s.get(lst) or [] for p in c.get("ports") or []),
        ),
    ]


CHECKS: tuple[Check, ...] = (
    *(_host_namespace(name) for name in HOST_NAMESPACES),
    Check(
        "volumes",
        "hostPath and the other node-bound volume types are not allowed (only configMap, csi, downwardAPI, "
        "emptyDir, ephemeral, persistentVolumeClaim, projected and secret)",
        "!has({s}.volumes) || {s}.volumes.all(v, " + " && ".join(f"!has(v.{t})" for t in NODE_VOLUME_TYPES) + ")",
        lambda s: not any(t in v for v in s.get("volumes") or [] for t in NODE_VOLUME_TYPES),
    ),
    Check(
        "securityContext",
        "runAsNonRoot false, runAsUser 0, seccomp or AppArmor other than RuntimeDefault/Localhost, SELinux "
        "user/role/type, hostProcess and sysctls outside the safe set are not allowed",
        "!has({s}.securityContext) || ((!has({s}.securityContext.sysctls) || {s}.securityContext.sysctls.all(x, "
        f"x.name in {_cel_list(SAFE_SYSCTLS)})) && {_cel_context('{s}.securityContext')})",
        lambda s: (
            s.get("securityContext") is None
            or (
                all(x.get("name") in SAFE_SYSCTLS for x in s["securityContext"].get("sysctls") or [])
                and _context_ok(s["securityContext"])
            )
        ),
    ),
    *(check for lst in CONTAINER_LISTS for check in _containers(lst)),
)


# --- what render forces into a Restricted job's pods -------------------------------------------------------


def restrict_context(sc: dict) -> dict:
    """`sc` (merged with the defaults already) with every field restricted forbids set to its safe value.

    Validate refuses templates that set them; this makes the rendered pod restricted even so, e.g. for a job
    the API server stored before these rules existed.
    """
    out = dict(sc)
    out["runAsNonRoot"] = True
    if out.get("runAsUser") == 0:
        del out["runAsUser"]
    for key in ("seccompProfile", "appArmorProfile"):
        if (out.get(key) or {}).get("type") not in (None, *PROFILE_TYPES):
            out[key] = {"type": "RuntimeDefault"}
    selinux = out.get("seLinuxOptions")
    if selinux is not None:
        out["seLinuxOptions"] = {k: v for k, v in selinux.items() if k == "level"}
    if (out.get("windowsOptions") or {}).get("hostProcess"):
        out["windowsOptions"] = {k: v for k, v in out["windowsOptions"].items() if k != "hostProcess"}
    return out


def restrict_container(sc: dict) -> dict:
    """A container's security context made restricted (see `restrict_context`)."""
    out = restrict_context(sc)
    out["allowPrivilegeEscalation"] = False
    out.pop("privileged", None)
    out.pop("procMount", None)
    caps = dict(out.get("capabilities") or {})
    caps["drop"] = ["ALL", *(c for c in caps.get("drop") or [] if c != "ALL")]
    add = [c for c in caps.get("add") or [] if c == ALLOWED_CAPABILITY]
    caps.pop("add", None)
    out["capabilities"] = {**caps, "add": add} if add else caps
    return out


def restrict_pod_spec(spec: dict) -> None:
    """A Restricted job's pod spec, in place: no host namespaces, host ports or unsafe sysctls, restricted
    security contexts on the pod and every container. (Node volume types cannot be made safe: validate
    refuses them, and the API server's PodSecurity admission would refuse the pod.)"""
    for name in HOST_NAMESPACES:
        spec.pop(name, None)
    sc = restrict_context(spec.get("securityContext") or {})
    if "sysctls" in sc:
        sc["sysctls"] = [x for x in sc["sysctls"] if x.get("name") in SAFE_SYSCTLS]
    spec["securityContext"] = sc
    for lst in CONTAINER_LISTS:
        for container in spec.get(lst) or []:
            container["securityContext"] = restrict_container(container.get("securityContext") or {})
            for port in container.get("ports") or []:
                port.pop("hostPort", None)
