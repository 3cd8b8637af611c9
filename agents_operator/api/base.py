"""What every model of the API is made of: the two kinds of model (ours, and Kubernetes objects we only
partly model), and the field types and patterns several of them share. Pure module."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from agents_operator import naming
from agents_operator.contract import CONDITION_TYPES

RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None"]
SuccessPolicy = Literal["ChiefWorker", "AllWorkers"]
ConditionType = Literal[CONDITION_TYPES]  # type: ignore[valid-type]
STORAGE_PATH = r"^(/([^/\s.][^/\s]*|\.[^/\s.][^/\s]*|\.\.[^/\s]+))+$"
"""Absolute paths of named segments: '/', '//', '/a/', '.' and '..' segments and whitespace do not match
(a mount at '/' would hide the image; '..' would leave the volume). RE2 has no lookahead, hence the three
spellings of a segment that is neither '.' nor '..'."""
LabelValue = Annotated[str, Field(max_length=naming.LABEL_VALUE_MAX, pattern=naming.LABEL_VALUE)]
QualifiedName = Annotated[str, Field(max_length=naming.QUALIFIED_NAME_MAX, pattern=naming.QUALIFIED_NAME)]


def _nullable(annotation: Any) -> bool:
    """Whether a field's type admits None (its CRD property is `nullable`)."""
    if annotation is None or annotation is type(None):
        return True
    if typing.get_origin(annotation) is Annotated:
        return _nullable(typing.get_args(annotation)[0])
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return is_union and type(None) in typing.get_args(annotation)


class CamelModel(BaseModel):
    """Our own API objects: camelCase on the wire, unknown fields rejected, no infinities or NaN (JSON has
    none, so the API server never sees one)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_disallowed_nulls(cls, data: Any) -> Any:
        """Drop a null where the field does not admit one, as the API server does before defaulting (a
        structural schema prunes nulls of non-nullable fields), so the default applies here too."""
        if not isinstance(data, dict):
            return data
        fields = {info.alias or name: info for name, info in cls.model_fields.items()}
        fields.update(cls.model_fields)
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in fields or _nullable(fields[key].annotation)
        }


class KubeModel(BaseModel):
    """A Kubernetes object we only partly model: fields we don't name are kept as they are."""

    model_config = ConfigDict(extra="allow")
