"""One FastAPI app factory for every app's service.

An app describes its service with a :class:`ServiceSpec` (request and response models and
an ``act`` function); :func:`create_app` wraps it with ``GET /healthz``, ``GET /v1/info``,
``POST /v1/act``, a request-size cap, an optional bearer token (``FIELDRL_API_TOKEN``) and
JSON errors: bad input is a 4xx naming the field, and the server keeps serving.

The order matters and is tested: the token is checked from the headers before any body
byte is read; the body is capped while it streams; parsing, validation, acting and
serializing run on a worker thread, so ``/healthz`` answers while a large request is scored.
"""

import hmac
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

import fieldrl

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "BinaryInput",
    "ErrorBody",
    "InputError",
    "RequestModel",
    "ResponseModel",
    "ServiceSpec",
    "create_app",
    "run_server",
]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
TOKEN_ENV = "FIELDRL_API_TOKEN"
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
log = logging.getLogger("fieldrl.serving")


class RequestModel(BaseModel):
    """Base of every request model: unknown fields, NaN and infinities are rejected, and so
    is a value of the wrong JSON type (strict: ``true`` or ``"1"`` is never a number, ``0``
    never a flag or a date; an integer is still a float, an ISO string a date). The JSON
    route validates strictly all the way down, so nested models need not derive from this
    one."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class ResponseModel(BaseModel):
    """Base of every response model: a NaN or infinity can never be sent (building such a
    response fails, and the request is answered 500 instead)."""

    model_config = ConfigDict(allow_inf_nan=False)


class FieldError(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """Every error: one line, and for bad input the fields at fault."""

    error: str
    detail: list[FieldError] | None = None


ERRORS = {
    400: "Malformed JSON (or JSON nested too deeply).",
    401: "Missing or wrong bearer token (only when the service requires one).",
    413: "Request body over the service's byte limit.",
    415: "Wrong Content-Type for this route.",
    422: "A field is invalid: wrong type, out of range, or inconsistent with the model.",
    500: "Internal error; the server keeps serving.",
}


class InputError(ValueError):
    """Raised by an app's ``act`` (or a binary decoder) for input that makes no sense (a wrong
    shape, an out-of-order window); answered as 422 naming ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class BinaryInput:
    """A second encoding of the request (e.g. Arrow IPC for large batches), served at
    ``POST /v1/act/<name>``: ``decode`` turns the raw body into what ``act`` takes (raising
    InputError for a malformed one)."""

    media_type: str
    decode: Callable[[bytes], Any]


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

    @classmethod
    def for_run(
        cls,
        run: Any,
        request_model: type[BaseModel],
        response_model: type[BaseModel],
        act: Callable[[Any], BaseModel],
        **rest: Any,
    ) -> "ServiceSpec":
        """The spec of a loaded run (a :class:`~fieldrl.runs.LoadedRun`): its app, model
        version and config hash filled in; ``rest`` as the fields (``info``...)."""
        return cls(run.config.app, request_model, response_model, act, run.model_version,
                   run.config_hash, **rest)  # fmt: skip


def _error(
    status: int, message: str, detail: list[dict[str, str]] | None = None, **headers: str
) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(status_code=status, content=body, headers=headers or None)


def _invalid(exc: ValidationError, prefix: str = "") -> JSONResponse:
    """400 for malformed JSON, else 422 naming each field (at most 20)."""
    errors = exc.errors(include_url=False)
    if errors and errors[0]["type"] == "json_invalid":
        return _error(400, f"malformed JSON: {errors[0].get('ctx', {}).get('error', '')}")
    detail = [{"field": prefix + (".".join(str(p) for p in e["loc"]) or "body"),
               "message": e["msg"]} for e in errors[:20]]  # fmt: skip
    return _error(422, f"invalid field '{detail[0]['field']}': {detail[0]['message']}", detail)


class _Guard:
    """ASGI middleware, outermost: the token from the headers first (a request without it
    costs nothing: its body is never read), then the body cap, counted as it streams."""

    def __init__(self, app: Any, token: str | None, limit: int) -> None:
        self.app, self.token, self.limit = app, token, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        # answered before the body is read: the client is told the connection closes
        if self.token is not None and scope["path"] not in OPEN_PATHS:
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given, self.token.encode()):
                await _error(401, "missing or wrong bearer token", connection="close",
                             **{"www-authenticate": "Bearer"})(scope, receive, send)  # fmt: skip
                return
        too_big = _error(413, f"request body over the {self.limit}-byte limit", connection="close")
        declared = headers.get(b"content-length")
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


def _answer(spec: ServiceSpec, parse: Callable[[], Any]) -> Response:
    """Parse, act and serialize (on a worker thread); every failure is a JSON error."""
    try:
        request = parse()
    except ValidationError as exc:
        return _invalid(exc)
    except InputError as exc:
        return _error(422, str(exc), [{"field": exc.field, "message": exc.message}])
    try:
        reply = spec.act(request)
        content = reply.model_dump_json()
    except InputError as exc:
        return _error(422, str(exc), [{"field": exc.field, "message": exc.message}])
    except Exception as exc:  # a bug, or a response that failed its own model
        log.exception("unhandled error in %s's act", spec.app)
        return _error(500, f"internal error: {type(exc).__name__}")
    return Response(content, media_type="application/json")


def create_app(
    spec: ServiceSpec,
    *,
    token: str | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """The FastAPI app for ``spec``. ``token`` defaults to ``$FIELDRL_API_TOKEN`` (unset or
    empty: open); ``max_body_bytes`` to the spec's (8 MiB unless the app needs more)."""
    if not issubclass(spec.response_model, ResponseModel):
        raise TypeError(
            f"{spec.response_model.__name__} must subclass fieldrl.serving.ResponseModel"
        )
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    token = token or None
    max_body_bytes = max_body_bytes or spec.max_body_bytes
    api = FastAPI(
        title=f"fieldrl {spec.app}",
        version=fieldrl.__version__,
        description=f"Policy service for the fieldrl `{spec.app}` app. Errors are "
        '`{"error": ..., "detail": [{"field": ..., "message": ...}]}`.',
    )
    errors = {code: {"model": ErrorBody, "description": text} for code, text in ERRORS.items()
              if code != 401 or token is not None}  # fmt: skip

    @api.get("/healthz", summary="Liveness (never needs the token)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get(
        "/v1/info",
        summary="App, model version, config hash and I/O schema",
        responses={k: v for k, v in errors.items() if k == 401},
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

    request_ref = {"$ref": f"#/components/schemas/{spec.request_model.__name__}"}

    @api.post(
        "/v1/act",
        response_model=spec.response_model,
        summary="Actions for a batch",
        responses=errors,
        openapi_extra={"requestBody": {
            "content": {"application/json": {"schema": request_ref}}, "required": True}},
    )  # fmt: skip
    async def act(request: Request) -> Response:
        if not _is_json(request.headers.get("content-type")):
            return _error(415, "send this route application/json")
        body = await request.body()
        return await run_in_threadpool(
            _answer, spec, lambda: spec.request_model.model_validate_json(body, strict=True)
        )

    for name, binary in spec.binary_inputs.items():
        _add_binary_route(api, name, binary, spec, errors)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = get_openapi(title=api.title, version=api.version,
                                 description=api.description, routes=api.routes)  # fmt: skip
            request = spec.request_model.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(request.pop("$defs", {}))
            components[spec.request_model.__name__] = request
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    api.add_middleware(_Guard, token=token, limit=max_body_bytes)
    return api


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "application/json").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _add_binary_route(
    api: FastAPI, name: str, binary: BinaryInput, spec: ServiceSpec, responses: dict
) -> None:
    @api.post(
        f"/v1/act/{name}",
        response_model=spec.response_model,
        summary=f"Actions for a batch sent as {binary.media_type}",
        responses=responses,
        openapi_extra={"requestBody": {"content": {binary.media_type: {
            "schema": {"type": "string", "format": "binary"}}}, "required": True}},
    )  # fmt: skip
    async def act_binary(request: Request) -> Response:
        given = request.headers.get("content-type", "").split(";")[0].strip()
        if given != binary.media_type:
            return _error(415, f"send this route {binary.media_type}, not {given!r}")
        body = await request.body()
        return await run_in_threadpool(_answer, spec, lambda: binary.decode(body))


def run_server(api: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``api`` with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(api, host=host, port=port, log_level="info", timeout_keep_alive=30)
