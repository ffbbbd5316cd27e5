"""The ``PodLogOptions`` of a log request, decoded and validated as upstream does (pure):
the API server's ``pods/{name}/log`` (``api/pod_logs.py``) and the kubelet's
``/containerLogs`` (the node agent of ``make cluster``) read the same query parameters.

Upstream (v1.36.3) both decode them with apimachinery's parameter codec (``runtime/
conversion.go``: flags and integers; ``apis/meta/v1/time.go``: ``sinceTime`` as RFC
3339) and check them with ``ValidatePodLogOptions`` (``pkg/apis/core/validation/
validation.go``). A parameter that does not parse is :class:`UndecodableOptions`, one
out of range :class:`InvalidOptions`; each server answers them in its own words (the
API server 400/422 ``Status``, the kubelet 400/422 with a fixed text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


class UndecodableOptions(ValueError):
    """A parameter does not parse (the codec's error text)."""


class InvalidOptions(ValueError):
    """The options parse but ``ValidatePodLogOptions`` refuses them (its message)."""


@dataclass(frozen=True)
class LogOptions:
    container: str | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: datetime | None = None
    limit_bytes: int | None = None


def _flag(value: str | None) -> bool:
    """apimachinery's ``Convert_Slice_string_To_bool``: present and not ``0``/``false``."""
    return value is not None and value != "0" and value.lower() != "false"


def _integer(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 10)
    except ValueError:
        raise UndecodableOptions(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UndecodableOptions(
            f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse as RFC3339'
        )
    return moment


def _problems(options: LogOptions, stream: str | None) -> list[str]:
    """``ValidatePodLogOptions`` (the split-streams feature gate is off by default)."""
    problems = []
    if options.tail_lines is not None and options.tail_lines < 0:
        problems.append(
            f"tailLines: Invalid value: {options.tail_lines}: must be greater than or equal to 0"
        )
    if options.limit_bytes is not None and options.limit_bytes < 1:
        problems.append(f"limitBytes: Invalid value: {options.limit_bytes}: must be greater than 0")
    if options.since_seconds is not None and options.since_time is not None:
        problems.append(
            ": Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        )
    elif options.since_seconds is not None and options.since_seconds < 1:
        problems.append(
            f"sinceSeconds: Invalid value: {options.since_seconds}: must be greater than 0"
        )
    if stream is not None:
        problems.append("stream: Forbidden: may not be specified")
    return problems


def parse_log_options(query: Mapping[str, str]) -> LogOptions:
    """The request's ``PodLogOptions``: ``UndecodableOptions`` when one does not parse,
    ``InvalidOptions`` when ``ValidatePodLogOptions`` refuses them."""
    options = LogOptions(
        container=query.get("container") or None,
        follow=_flag(query.get("follow")),
        previous=_flag(query.get("previous")),
        timestamps=_flag(query.get("timestamps")),
        tail_lines=_integer(query.get("tailLines")),
        since_seconds=_integer(query.get("sinceSeconds")),
        since_time=_moment(query.get("sinceTime")),
        limit_bytes=_integer(query.get("limitBytes")),
    )
    problems = _problems(options, query.get("stream"))
    if problems:
        message = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
        raise InvalidOptions(message)
    return options
