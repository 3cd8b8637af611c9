"""A mirror of the Kubernetes pod template, as far as the AgentsJob's templates need one: every field a user
sets is kept as given, and the fields the CRD's CEL rules must see (Pod Security "restricted" constrains them)
are modelled. Pure module."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.alias_generators import to_camel

from agents_operator import naming, podsecurity
from agents_operator.api.base import KubeModel, LabelValue

Text64 = Annotated[str, Field(max_length=64)]


class Profile(KubeModel):
    type: str | None = Field(
        None, max_length=32, description="RuntimeDefault or Localhost under podSecurity Restricted."
    )


class SELinuxOptions(KubeModel):
    type: str | None = Field(None, max_length=253)
    user: str | None = Field(None, max_length=253)
    role: str | None = Field(None, max_length=253)


class WindowsOptions(KubeModel):
    host_process: bool | None = Field(None, alias="hostProcess")


class Capabilities(KubeModel):
    add: list[Text64] | None = Field(None, max_length=64)
    drop: list[Text64] | None = Field(None, max_length=64)


class Sysctl(KubeModel):
    name: str = Field(max_length=253)


# The security fields below are modelled (the rest of a pod spec is kept as given) so that the CRD's CEL rules
# can see them: an object that keeps unknown fields shows CEL only the fields its schema names.


class SecurityContext(KubeModel):
    """The fields of a (pod or container) security context that Pod Security "restricted" constrains."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    run_as_non_root: bool | None = None
    run_as_user: int | None = None
    seccomp_profile: Profile | None = None
    app_armor_profile: Profile | None = None
    se_linux_options: SELinuxOptions | None = Field(None, alias="seLinuxOptions")
    windows_options: WindowsOptions | None = None


class ContainerSecurityContext(SecurityContext):
    privileged: bool | None = None
    allow_privilege_escalation: bool | None = None
    capabilities: Capabilities | None = None
    proc_mount: str | None = Field(None, max_length=32)


class PodSecurityContext(SecurityContext):
    sysctls: list[Sysctl] | None = Field(None, max_length=64)


class ContainerPort(KubeModel):
    host_port: int | None = Field(None, alias="hostPort")


class Container(KubeModel):
    name: str = Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Container name.")
    image: str | None = Field(None, max_length=1024, description="Image; defaults to spec.image.")
    security_context: ContainerSecurityContext | None = Field(None, alias="securityContext")
    ports: list[ContainerPort] | None = Field(None, max_length=64, description="ContainerPort objects; ours are added.")
    # Typed because the render edits them: a malformed one is refused here and by the API server.
    env: list[dict[str, Any]] | None = Field(None, description="EnvVar objects; the operator adds its own.")
    volume_mounts: list[dict[str, Any]] | None = Field(
        None, alias="volumeMounts", description="VolumeMount objects; the run directory's is added."
    )


def _volume_model() -> type[BaseModel]:
    """A Volume, with every node-bound source type named (see `podsecurity.NODE_VOLUME_TYPES`)."""
    fields: dict[str, Any] = {"name": (str, Field(max_length=63))}
    fields.update({t: (dict[str, Any] | None, None) for t in podsecurity.NODE_VOLUME_TYPES})
    return create_model("Volume", __base__=KubeModel, **fields)


Volume = _volume_model()


class PodSpec(KubeModel):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    containers: list[Container] = Field(
        min_length=1,
        max_length=32,
        description=f"Containers of the replica. The one named '{naming.TRAINER_CONTAINER}' (or else the first) runs "
        "the trainer.",
    )
    init_containers: list[Container] | None = Field(
        None, max_length=32, description="Init containers (Container objects)."
    )
    volumes: list[Volume] | None = Field(  # type: ignore[valid-type]
        None, max_length=256, description="Volume objects; the run directory's is added."
    )
    host_network: bool | None = None
    host_pid: bool | None = Field(None, alias="hostPID")
    host_ipc: bool | None = Field(None, alias="hostIPC")
    security_context: PodSecurityContext | None = None


class TemplateMeta(KubeModel):
    labels: dict[str, LabelValue] | None = Field(None, description="Labels of the pods (ours are added).")
    annotations: dict[str, str] | None = Field(None, description="Annotations of the pods.")


class PodTemplate(KubeModel):
    """A PodTemplateSpec. Every field the user sets is kept; the operator adds its own."""

    metadata: TemplateMeta | None = Field(None, description="Labels and annotations for the pods.")
    spec: PodSpec
