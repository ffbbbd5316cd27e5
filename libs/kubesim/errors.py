"""API errors as the Kubernetes API server reports them: an HTTP code and a ``Status``
body whose ``reason`` clients switch on (only ``reason`` tells AlreadyExists from
Conflict, both 409)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:
            del body["reason"]  # StatusReasonUnknown is "" and omitted, as upstream
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    details = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found', _details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        409, "AlreadyExists", f'{what} "{name}" already exists', _details(plural, name, group)
    )


def conflict(plural: str, name: str, message: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {message}',
        _details(plural, name, group),
    )


def invalid(kind: str, name: str, message: str) -> ApiError:
    return ApiError(
        422, "Invalid", f'{kind} "{name}" is invalid: {message}', {"name": name, "kind": kind}
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
