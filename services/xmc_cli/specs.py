"""Work units and launches from flags and spec files: pure, no RPCs.

Everything a command could reject is decided here, before the first RPC, so ``xmc
launch`` never creates an experiment it then cannot fill because of a typo in its spec.
Errors are :class:`SpecError` with a message naming the flag or the field
(``--spec s.yaml: sweep[1].lr: ...``); the commands turn them into ``error: ...``.

A launch spec (YAML or JSON) holds the experiment's fields and its work units::

    title: lr sweep                  # or --title
    tags: [baseline]                 # --tag adds to these
    notes: first try
    priority: HIGH                   # LOW | NORMAL | HIGH
    work_unit:                       # one template, in `xmc wu create --file` form
      jobs: [{name: main, replicas: 1, spec: {docker_image: python:3.11}}]
    sweep:                           # one work unit per entry: the template plus these
      - {lr: 0.1}                    #   args on every job's main container
      - {lr: 0.01}

or ``work_units: [...]``, a list of work units each in that form, instead of
``work_unit`` and ``sweep``. Without ``work_unit`` the template comes from the flags
(``--image``, ``--command``, ...).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from xmc.model.states import Priority
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

#: The published client's default Kueue LocalQueue.
DEFAULT_QUEUE = "cpu-queue"
DEFAULT_JOB_NAME = "main"

LAUNCH_FIELDS = ("title", "tags", "notes", "priority", "work_unit", "work_units", "sweep")
_PRIORITIES = {p.name: p for p in Priority if p is not Priority.PRIORITY_UNSPECIFIED}


class SpecError(ValueError):
    """Input that cannot become a request; the message names the flag or field."""


@dataclass(frozen=True)
class UnitOptions:
    """The flags that describe one single-container work unit (``xmc wu create`` and
    ``xmc launch`` share them). None means "not given", so a flag that a spec file would
    silently override can be refused instead."""

    image: str | None = None
    command: str | None = None
    cpu: int | None = None
    memory_bytes: int | None = None
    env: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    job_name: str | None = None
    replicas: int | None = None

    def given(self) -> list[str]:
        """The job-shaping flags that were given, as ``--flag`` names."""
        return [_FLAGS[f.name] for f in fields(self) if getattr(self, f.name) not in (None, ())]


_FLAGS = {
    "image": "--image",
    "command": "--command",
    "cpu": "--cpu",
    "memory_bytes": "--memory-bytes",
    "env": "--env",
    "annotations": "--annotation",
    "job_name": "--job-name",
    "replicas": "--replicas",
}


def _pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (split at the first ``=``, so a value may hold more)."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{flag}: expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def work_unit_from_options(options: UnitOptions, *, alternative: str) -> WorkUnit:
    """One job with one container, from the flags; ``alternative`` names what could have
    described the work unit instead of ``--image``."""
    if not options.image:
        raise SpecError(f"--image (or {alternative}) is required")
    work_unit = WorkUnit()
    job = work_unit.executable.jobset.jobs.add(
        name=options.job_name or DEFAULT_JOB_NAME,
        replicas=1 if options.replicas is None else options.replicas,
    )
    job.spec.docker_image = options.image
    if options.command:
        try:
            job.spec.command.extend(shlex.split(options.command))
        except ValueError as exc:
            raise SpecError(f"--command: {exc}") from None
    if options.cpu is not None:
        job.spec.resources.cpu_resources.cpu_millicores = options.cpu
    if options.memory_bytes is not None:
        job.spec.resources.cpu_resources.memory_bytes = options.memory_bytes
    job.spec.env_vars.update(_pairs(options.env, "--env"))
    # Pod-template annotations: on kubesim, kubesim.xmc/behavior scripts the run.
    job.annotations.update(_pairs(options.annotations, "--annotation"))
    return work_unit


def work_unit_from_dict(data: Any, where: str) -> WorkUnit:
    """A WorkUnit, or just its JobSetExecutable, in protobuf JSON form."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: must be a mapping, got {type(data).__name__}")
    work_unit = WorkUnit()
    try:
        if {"executable", "work_unit_type", "workUnitType"} & data.keys():
            json_format.ParseDict(data, work_unit)
        else:
            json_format.ParseDict(data, work_unit.executable.jobset)
    except json_format.ParseError as exc:
        # protobuf appends every field name of the message, camelCased; the first line
        # already names the bad field and where it is.
        raise SpecError(f"{where}: {str(exc).splitlines()[0]}") from None
    return work_unit


def set_queue(work_unit: WorkUnit, queue: str | None) -> WorkUnit:
    """The flag's queue, else the spec's, else the published client's default."""
    constraints = work_unit.executable.scheduling_constraints
    constraints.queue_name = queue or constraints.queue_name or DEFAULT_QUEUE
    return work_unit


def read_document(path: Path, flag: str) -> Any:
    """A YAML or JSON file's content (``.json`` is read as JSON, anything else as YAML)."""
    try:
        text = path.read_text()
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SpecError(f"{flag}: cannot read {path}: {exc}") from None


def build_work_unit(
    document: Any | None, options: UnitOptions, *, queue: str | None, where: str
) -> WorkUnit:
    """``xmc wu create``'s work unit: from a file's ``document`` or from the flags."""
    if document is None:
        return set_queue(work_unit_from_options(options, alternative=where), queue)
    if options.given():
        raise SpecError(f"{where} cannot be combined with {', '.join(options.given())}")
    return set_queue(work_unit_from_dict(document, where), queue)


@dataclass(frozen=True)
class LaunchPlan:
    """What ``xmc launch`` will create, in order: the experiment, then each work unit."""

    experiment: Experiment
    work_units: tuple[WorkUnit, ...]


@dataclass(frozen=True)
class LaunchFlags:
    """``xmc launch``'s own flags; they win over (``--tag``: add to) the spec's fields."""

    title: str | None = None
    tags: tuple[str, ...] = ()
    notes: str | None = None
    queue: str | None = None
    count: int | None = None
    """None when not given: one work unit from the flags; refused with a list or sweep."""


def _text(spec: Mapping[str, Any], key: str, where: str) -> str | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(f"{where}: {key}: must be a string, got {type(value).__name__}")
    return value


def _list(spec: Mapping[str, Any], key: str, where: str) -> list[Any] | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: {key}: must be a non-empty list")
    return value


def _experiment(spec: Mapping[str, Any], flags: LaunchFlags, where: str) -> Experiment:
    title = flags.title or _text(spec, "title", where)
    if not title:
        raise SpecError("--title (or title in --spec) is required")
    tags = _list(spec, "tags", where) or []
    for i, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise SpecError(f"{where}: tags[{i}]: must be a string, got {type(tag).__name__}")
    experiment = Experiment(
        title=title,
        tags=[*tags, *flags.tags],
        notes=flags.notes if flags.notes is not None else (_text(spec, "notes", where) or ""),
    )
    priority = _text(spec, "priority", where)
    if priority is not None:
        if priority.upper() not in _PRIORITIES:
            raise SpecError(f"{where}: priority: must be one of {', '.join(_PRIORITIES)}")
        experiment.priority = int(_PRIORITIES[priority.upper()])  # type: ignore[assignment]
    return experiment


def _arg_value(value: Any, where: str) -> str:
    """A sweep value as the string a container arg is: YAML ``true`` → ``true``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise SpecError(f"{where}: must be a string, number or boolean, got {type(value).__name__}")


def _swept(template: WorkUnit, point: Any, where: str) -> WorkUnit:
    """The template with one sweep point's args set on every job's main container."""
    if not isinstance(point, dict) or not point:
        raise SpecError(f"{where}: must be a non-empty mapping of argument names to values")
    work_unit = _copy(template)
    for name, value in point.items():
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: argument names must be non-empty strings, got {name!r}")
        for job in work_unit.executable.jobset.jobs:
            job.spec.args[name] = _arg_value(value, f"{where}.{name}")
    return work_unit


def _work_units(
    spec: Mapping[str, Any], options: UnitOptions, count: int | None, where: str
) -> list[WorkUnit]:
    listed = _list(spec, "work_units", where)
    sweep = _list(spec, "sweep", where)
    template_data = spec.get("work_unit")
    if listed is not None and (template_data is not None or sweep is not None):
        raise SpecError(f"{where}: work_units cannot be combined with work_unit or sweep")
    if (listed is not None or sweep is not None) and count is not None:
        raise SpecError(f"--count cannot be combined with {'work_units' if listed else 'sweep'}")
    if (listed is not None or template_data is not None) and options.given():
        raise SpecError(
            f"{', '.join(options.given())} cannot be combined with "
            f"{'work_units' if listed is not None else 'work_unit'} in {where}"
        )
    if listed is not None:
        return [work_unit_from_dict(d, f"{where}: work_units[{i}]") for i, d in enumerate(listed)]
    if template_data is not None:
        template = work_unit_from_dict(template_data, f"{where}: work_unit")
    else:
        template = work_unit_from_options(options, alternative="--spec with work_unit")
    if sweep is not None:
        return [_swept(template, p, f"{where}: sweep[{i}]") for i, p in enumerate(sweep)]
    return [_copy(template) for _ in range(count or 1)]


def _copy(work_unit: WorkUnit) -> WorkUnit:
    copied = WorkUnit()
    copied.CopyFrom(work_unit)
    return copied


def plan_launch(
    spec: Any | None, *, flags: LaunchFlags, options: UnitOptions, where: str
) -> LaunchPlan:
    """The experiment and work units for ``xmc launch``, from a spec file's content
    (None without ``--spec``) and the flags; SpecError names what is wrong."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise SpecError(f"{where}: must hold a mapping, got {type(spec).__name__}")
    unknown = sorted(str(k) for k in spec.keys() - set(LAUNCH_FIELDS))
    if unknown:
        raise SpecError(
            f"{where}: unknown field {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(LAUNCH_FIELDS)})"
        )
    experiment = _experiment(spec, flags, where)
    units = _work_units(spec, options, flags.count, where)
    return LaunchPlan(experiment, tuple(set_queue(u, flags.queue) for u in units))
