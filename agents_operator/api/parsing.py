"""Parsing a manifest into an AgentsJob, with errors a person can act on: every problem found, each naming its
field as the API server would. Pure module."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agents_operator import naming, presets
from agents_operator.api.models import AgentsJob
from agents_operator.api.rules import METRICS_PORT_MESSAGE, RULES, metrics_port_free
from agents_operator.config import TrainerConfig, camel_name


@dataclass(frozen=True)
class Problem:
    """One reason a manifest is invalid: where (a field path) and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


class InvalidJob(ValueError):
    """The manifest is not a valid AgentsJob; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _object_meta_style(loc: tuple, reason: str) -> tuple[tuple, str]:
    """A dict's key is marked '[key]' by pydantic: say "key:" instead. The job's own labels and annotations
    are named as the API server names them, the map with the entry's key in the reason."""
    if loc[-1:] == ("[key]",):
        loc, reason = loc[:-1], f"key: {reason}"
    if len(loc) > 2 and loc[0] == "metadata" and loc[1] in ("labels", "annotations"):
        loc, reason = loc[:2], f"{loc[2]!r}: {reason}"
    return loc, reason


def _pydantic_problems(err: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            reason = "unknown field"
        elif e["type"] == "literal_error":
            reason = f"must be one of {e['ctx']['expected']}" if "ctx" in e else reason
        loc, reason = _object_meta_style(loc, reason)
        path = _loc(loc)
        problems.append(Problem(f"{prefix}.{path}" if prefix and path else prefix or path, reason))
    return problems


def check_rules(new: AgentsJob, old: AgentsJob | None = None) -> list[Problem]:
    """Problems from RULES (transition rules only when `old` is given)."""
    problems = []
    for rule in RULES:
        if rule.transition and old is None:
            continue
        if not rule.check(new, old):
            problems.append(Problem(rule.field, rule.message))
    return problems


def _previous(old: dict | None) -> AgentsJob | None:
    """The job before an update, parsed; None when there is none or it no longer parses (nothing to compare)."""
    if old is None:
        return None
    try:
        return AgentsJob.model_validate(json_numbers(old), strict=True)
    except ValidationError:
        return None


def parse_job(data: Any, old: dict | None = None) -> AgentsJob:
    """Validate a manifest (a dict as loaded from YAML) completely, or raise InvalidJob naming every problem.

    Beyond the CRD's schema and CEL rules this resolves the trainer preset and its overrides, which the CRD
    cannot check (presets live in the trainer image).
    """
    if not isinstance(data, dict):
        raise InvalidJob([Problem("", f"expected a mapping (an AgentsJob object), got {type(data).__name__}")])
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if kind != naming.KIND or api_version != naming.API_VERSION:
        raise InvalidJob(
            [
                Problem(
                    "kind" if kind != naming.KIND else "apiVersion",
                    f"expected apiVersion {naming.API_VERSION} and kind {naming.KIND}, got {api_version!r} {kind!r}",
                )
            ]
        )
    not_json = _json_problems(data)
    if not_json:
        raise InvalidJob(not_json)
    data = json_numbers(data)
    try:
        job = AgentsJob.model_validate(data, strict=True)
    except ValidationError as err:
        raise InvalidJob(_pydantic_problems(err)) from None
    problems = check_rules(job, _previous(old))
    try:
        job._config = presets.resolve(job.spec.trainer.preset, job.overrides)
    except KeyError as err:
        problems.append(Problem("spec.trainer.preset", str(err.args[0])))
    except ValidationError as err:
        problems += _trainer_problems(err)
    else:
        problems += _environment_problems(job, job.config)
    if problems:
        raise InvalidJob(problems)
    return job


def _json_problems(value: Any, loc: tuple = ()) -> list[Problem]:
    """Values YAML can write but JSON cannot carry (.inf, .nan, !!binary, !!set), anywhere in the manifest,
    pod templates included: kubectl cannot send them, so no API server ever accepts them."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [Problem(_loc(loc), "not a finite number: JSON has no inf or NaN")]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _json_problems(item, (*loc, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _json_problems(item, (*loc, index))]
    if isinstance(value, (bytes, set)):
        return [Problem(_loc(loc), f"YAML's {type(value).__name__} has no JSON form")]
    return []


def json_numbers(value: Any) -> Any:
    """`value` with every integral float as an int, as kubectl sends YAML's `replicas: 2.0` (as 2), so validate
    reads it so too (types stay strict otherwise). A client must send it so as well: the API server reads a
    JSON 2.0 as a float, which the scale subresource's path (spec.replicaSpecs.worker.replicas) refuses."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: json_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_numbers(item) for item in value]
    return value


def _environment_problems(job: AgentsJob, config: TrainerConfig) -> list[Problem]:
    """Rules between spec.environments and the resolved trainer config (the CRD cannot see presets)."""
    environments = job.spec.environments
    problems = []
    # An explicit metricsPort is judged by its RULE (and the CRD); a preset's is judged here.
    preset_port = "metrics_port" not in job.spec.trainer.model_fields_set
    if preset_port and not metrics_port_free(config.metrics_port, environments.placement, environments.port):
        reason = f"the preset's {config.metrics_port}: {METRICS_PORT_MESSAGE}"
        problems.append(Problem("spec.trainer.metricsPort", reason))
    if environments.servers_per_worker > config.envs_per_worker:
        problems.append(
            Problem(
                "spec.environments.serversPerWorker",
                f"{environments.servers_per_worker} servers cannot split envsPerWorker {config.envs_per_worker}",
            )
        )
    return problems


def _trainer_problems(err: ValidationError) -> list[Problem]:
    problems = []
    for p in _pydantic_problems(err):
        name = p.field.split(".")[0].split("[")[0]
        field = p.field.replace(name, camel_name(name), 1) if name in TrainerConfig.model_fields else p.field
        problems.append(Problem(f"spec.trainer.{field}" if field else "spec.trainer", p.reason))
    return problems
