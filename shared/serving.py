"""One FastAPI app factory for every app's service.

An app describes its service with a :class:`ServiceSpec` (request and response models and
an ``act`` function); :func:`create_app` wraps it with ``GET /healthz``, ``GET /v1/info``,
``POST /v1/act``, a request-size cap, an optional bearer token (``FIELDRL_API_TOKEN``) and
JSON errors: bad input is a 4xx naming the field, and the server keeps serving.
"""

import hmac
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict

import fieldrl

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BinaryInput",
    "InputError",
    "RequestModel",
    "ServiceSpec",
    "create_app",
    "run_server",
]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
TOKEN_ENV = "FIELDRL_API_TOKEN"
log = logging.getLogger("fieldrl.serving")


class RequestModel(BaseModel):
    """Base of every request model: unknown fields, NaN and infinities are rejected."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class InputError(ValueError):
    """Raised by an app's ``act`` for input that validates but makes no sense (a wrong shape,
    an out-of-order window); answered as 422 naming ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class BinaryInput:
    """A second encoding of the request (e.g. Arrow IPC for large batches), served at
    ``POST /v1/act/<name>``: ``decode`` turns the raw body into the request model (raising
    InputError for a malformed one)."""

    media_type: str
    decode: Callable[[bytes], BaseModel]


@dataclass
class ServiceSpec:
    """What an app serves: its models, the ``act`` function and what ``/v1/info`` reports."""

    app: str
    request_model: type[BaseModel]
    response_model: type[BaseModel]
    act: Callable[[Any], BaseModel]
    model_version: str
    config_hash: str
    info: dict[str, Any] = field(default_factory=dict)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    binary_inputs: dict[str, BinaryInput] = field(default_factory=dict)


def _error(status: int, message: str, detail: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(status_code=status, content=body)


class _BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, whether declared or streamed.

    The body is read (at most ``limit`` bytes) before the app sees it, then replayed.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = _error(413, f"request body over the {self.limit}-byte limit")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await too_big(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await too_big(scope, receive, send)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def create_app(
    spec: ServiceSpec,
    *,
    token: str | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The FastAPI app for ``spec``. ``token`` defaults to ``$FIELDRL_API_TOKEN`` (unset: open);
    ``max_body_bytes`` to the spec's (8 MiB unless the app needs more)."""
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    max_body_bytes = max_body_bytes or spec.max_body_bytes
    bearer = HTTPBearer(auto_error=False)

    def check_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if token is None:
            return
        given = credentials.credentials if credentials else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"}
            )

    api = FastAPI(
        title=f"fieldrl {spec.app}",
        version=fieldrl.__version__,
        description=f"Policy service for the fieldrl `{spec.app}` app.",
    )

    @api.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            where = errors[0].get("ctx", {}).get("error", "")
            return _error(400, f"malformed JSON: {where}".rstrip(": "))
        detail = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "message": e["msg"]}
            for e in errors[:20]
        ]
        first = detail[0]
        return _error(422, f"invalid field '{first['field']}': {first['message']}", detail)

    @api.exception_handler(InputError)
    async def bad_input(_: Request, exc: InputError) -> JSONResponse:
        return _error(422, str(exc), [{"field": exc.field, "message": exc.message}])

    @api.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        response = _error(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @api.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in /v1/act")
        return _error(500, f"internal error: {type(exc).__name__}")

    @api.get("/healthz", summary="Liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get(
        "/v1/info",
        summary="App, model version, config hash and I/O schema",
        dependencies=[Depends(check_token)],
    )
    def info() -> dict[str, Any]:
        return {
            "app": spec.app,
            "model_version": spec.model_version,
            "config_hash": spec.config_hash,
            "fieldrl_version": fieldrl.__version__,
            "max_body_bytes": max_body_bytes,
            "input_schema": spec.request_model.model_json_schema(),
            "binary_inputs": {
                f"/v1/act/{name}": b.media_type for name, b in spec.binary_inputs.items()
            },
            "output_schema": spec.response_model.model_json_schema(),
            **spec.info,
        }

    request_model = spec.request_model

    @api.post(
        "/v1/act",
        response_model=spec.response_model,
        summary="Actions for a batch",
        dependencies=[Depends(check_token)],
    )
    def act(request: request_model) -> BaseModel:  # type: ignore[valid-type]
        return spec.act(request)

    for name, binary in spec.binary_inputs.items():
        _add_binary_route(api, name, binary, spec, check_token)

    api.add_middleware(_BodyLimit, limit=max_body_bytes)
    return api


def _add_binary_route(
    api: FastAPI, name: str, binary: BinaryInput, spec: ServiceSpec, check_token: Callable
) -> None:
    @api.post(
        f"/v1/act/{name}",
        response_model=spec.response_model,
        summary=f"Actions for a batch sent as {binary.media_type}",
        dependencies=[Depends(check_token)],
        openapi_extra={"requestBody": {"content": {binary.media_type: {}}, "required": True}},
    )
    async def act_binary(request: Request) -> BaseModel:
        given = request.headers.get("content-type", "").split(";")[0].strip()
        if given != binary.media_type:
            raise HTTPException(415, f"send this route {binary.media_type}, not {given!r}")
        body = await request.body()
        # decoding and acting are CPU work: off the event loop, like the JSON route
        return await run_in_threadpool(lambda: spec.act(binary.decode(body)))


def run_server(api: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``api`` with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(api, host=host, port=port, log_level="info", timeout_keep_alive=30)
