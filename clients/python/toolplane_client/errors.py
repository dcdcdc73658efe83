"""Typed errors: every failed call of the plane as a :class:`ToolplaneError`.

Each toolplane status carries ``google.rpc`` details in its ``grpc-status-details-bin`` trailer
(docs/errors.md, "Error details"). :func:`from_rpc_error` reads them with ``grpcio-status``:

- ``reason`` (also ``code``) is ``ErrorInfo.reason``, the stable ``namespace.snake_case`` code
  (``runtime.not_found``) — the one thing a client branches on;
- ``domain`` (``toolplane.dev``) and ``metadata`` (``service``, ``run_id``, ``tool_id``, ``cause``, …);
- ``retry_delay`` from ``RetryInfo`` where waiting and retrying helps, else ``None``;
- ``field_violations`` from ``BadRequest``: ``(field, description)`` of every ``INVALID_ARGUMENT``.

The class follows the gRPC status code (:class:`NotFoundError` for ``NOT_FOUND``, …), so
``except NotFoundError`` also works. A status without an ``ErrorInfo`` is not from toolplane (a
proxy in between, or gRPC itself: an unreachable address, a deadline); its ``reason`` is then
``grpc.<status>`` (``grpc.unavailable``) and its message is all there is.

Calls through :class:`~toolplane_client.Plane` and :class:`~toolplane_client.aio.AsyncPlane` raise
these; a call through a raw stub raises ``grpc.RpcError``, which ``from_rpc_error`` turns into one.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "DOMAIN",
    "AbortedError",
    "AlreadyExistsError",
    "CancelledError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ToolplaneError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "error_class",
    "from_rpc_error",
]

#: ``ErrorInfo.domain`` of every status toolplane makes.
DOMAIN = "toolplane.dev"


@dataclass(frozen=True)
class FieldViolation:
    """One ``BadRequest`` field violation: the request field (empty: the request as a whole) and
    what is wrong with it."""

    field: str
    description: str


class ToolplaneError(Exception):
    """A failed call. Branch on :attr:`reason`; the message is for people."""

    #: The gRPC status code this class stands for (``None``: any).
    grpc_code: grpc.StatusCode | None = None

    def __init__(
        self,
        reason: str,
        message: str,
        status: grpc.StatusCode | None = None,
        *,
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_delay: datetime.timedelta | None = None,
        field_violations: tuple[FieldViolation, ...] = (),
        details: tuple[Any, ...] = (),
    ):
        super().__init__(message)
        #: ``ErrorInfo.reason``: the stable code (``runtime.not_found``), or ``grpc.<status>``.
        self.reason = reason
        #: The whole message, ``<reason>: <what happened>``.
        self.message = message
        #: The gRPC status code.
        self.status = status if status is not None else self.grpc_code
        #: ``ErrorInfo.domain``: ``toolplane.dev`` for every status the plane made.
        self.domain = domain
        #: ``ErrorInfo.metadata``: ``service`` and, where they apply, ``run_id``, ``tool_id``, …
        self.metadata: dict[str, str] = dict(metadata or {})
        #: ``RetryInfo.retry_delay``: wait at least this long before sending the same request again.
        self.retry_delay = retry_delay
        #: ``BadRequest.field_violations``.
        self.field_violations = tuple(field_violations)
        #: Every detail of the status, unpacked where its type is known (``google.rpc`` types),
        #: else the ``google.protobuf.Any`` as sent.
        self.details = tuple(details)

    @property
    def code(self) -> str:
        """The same as :attr:`reason`: the code the docs' tables list."""
        return self.reason

    @property
    def retryable(self) -> bool:
        """Whether the plane said that sending the same request again later can succeed."""
        return self.retry_delay is not None

    def __repr__(self) -> str:
        status = self.status.name if self.status is not None else None
        return f"{type(self).__name__}(reason={self.reason!r}, status={status}, message={self.message!r})"

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> ToolplaneError:
        """The same as :func:`from_rpc_error`."""
        return from_rpc_error(error)


class CancelledError(ToolplaneError):
    grpc_code = grpc.StatusCode.CANCELLED


class UnknownError(ToolplaneError):
    grpc_code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(ToolplaneError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(ToolplaneError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(ToolplaneError):
    grpc_code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(ToolplaneError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(ToolplaneError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(ToolplaneError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(ToolplaneError):
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(ToolplaneError):
    grpc_code = grpc.StatusCode.ABORTED


class OutOfRangeError(ToolplaneError):
    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(ToolplaneError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(ToolplaneError):
    grpc_code = grpc.StatusCode.INTERNAL


class UnavailableError(ToolplaneError):
    grpc_code = grpc.StatusCode.UNAVAILABLE


class DataLossError(ToolplaneError):
    grpc_code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(ToolplaneError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


_BY_STATUS: dict[grpc.StatusCode, type[ToolplaneError]] = {
    cls.grpc_code: cls
    for cls in (
        CancelledError,
        UnknownError,
        InvalidArgumentError,
        DeadlineExceededError,
        NotFoundError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnimplementedError,
        InternalError,
        UnavailableError,
        DataLossError,
        UnauthenticatedError,
    )
    if cls.grpc_code is not None
}

_KNOWN_DETAILS = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.RetryInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.DebugInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RequestInfo,
    error_details_pb2.ResourceInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


def _rich_status(error: grpc.RpcError) -> status_pb2.Status | None:
    """The ``google.rpc.Status`` of the trailer, or ``None`` (none sent, or one that contradicts
    the call's own status: not to be trusted)."""
    if not hasattr(error, "trailing_metadata"):
        return None
    try:
        return rpc_status.from_call(error)
    except ValueError:
        return None


def _unpack(detail: Any) -> Any:
    for kind in _KNOWN_DETAILS:
        if detail.Is(kind.DESCRIPTOR):
            message = kind()
            detail.Unpack(message)
            return message
    return detail


def error_class(status: grpc.StatusCode | None) -> type[ToolplaneError]:
    """The class of errors with this gRPC status code."""
    return _BY_STATUS.get(status, ToolplaneError) if status is not None else ToolplaneError


def from_rpc_error(error: grpc.RpcError) -> ToolplaneError:
    """A ``grpc.RpcError`` (sync or ``grpc.aio``) as the typed error its details describe."""
    status = error.code() if hasattr(error, "code") else None
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    rich = _rich_status(error)
    details = tuple(_unpack(d) for d in rich.details) if rich is not None else ()
    info = next((d for d in details if isinstance(d, error_details_pb2.ErrorInfo)), None)
    retry = next((d for d in details if isinstance(d, error_details_pb2.RetryInfo)), None)
    bad = next((d for d in details if isinstance(d, error_details_pb2.BadRequest)), None)
    if info is not None and info.reason:
        reason = info.reason
    else:
        reason = "grpc." + (status.name.lower() if status is not None else "unknown")
    return error_class(status)(
        reason,
        message,
        status,
        domain=info.domain if info is not None else "",
        metadata=dict(info.metadata) if info is not None else {},
        retry_delay=retry.retry_delay.ToTimedelta() if retry is not None and retry.HasField("retry_delay") else None,
        field_violations=tuple(FieldViolation(v.field, v.description) for v in bad.field_violations)
        if bad is not None
        else (),
        details=details,
    )
