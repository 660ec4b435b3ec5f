"""An LLM agent over any OpenAI-compatible chat-completions endpoint (vLLM, Ollama, a
hosted API), with three tools: ``get_chain``, ``get_portfolio`` and ``submit_orders``.

Each step the agent gets the time, the spot and its account, may call tools, and ends its
turn with a message without tool calls (hold) or after its orders are answered. It acts
through the step's :class:`~fieldrl.apps.options.env.OrderDesk` (the present only, no
env). Every ``submit_orders`` goes through the environment: all-or-nothing validation,
the rejection's code and message returned to the model, at most ``1 + max_retries``
tries a step. A reply that is not JSON, or arguments that do not parse as orders, count
as ``schema_invalid`` attempts. Nothing here needs a model to be reachable:
:class:`ScriptedServer` replays scripted replies over HTTP for tests and the demo.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np

from fieldrl.apps.options.env import OrderDesk
from fieldrl.apps.options.orders import Reject, Rejection, parse_order
from fieldrl.errors import FieldrlError

__all__ = ["TOOLS", "LLMAgent", "ScriptedServer"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_chain",
        "description": "The option chain now: expiries, strikes near the money, bid, ask, "
                       "implied volatility and delta.",
        "parameters": {"type": "object", "properties": {
            "expiries": {"type": "integer", "description": "How many expiries (default 4)."},
            "strikes": {"type": "integer", "description": "Strikes each side of the money "
                                                          "(default 6)."}}}}},
    {"type": "function", "function": {
        "name": "get_portfolio",
        "description": "Cash, positions, NAV, margin requirement and dollar Greeks.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "submit_orders",
        "description": "Send multi-leg orders; each is validated all or nothing and answered "
                       "with its fill or its rejection code.",
        "parameters": {"type": "object", "properties": {"orders": {"type": "array", "items": {
            "type": "object", "description": "underlying, legs [{instrument, right, strike, "
            "expiry (YYYY-MM-DD), side, quantity}], order_type (market, limit, mid_offset), "
            "limit, mid_offset, view (bullish, bearish, neutral, volatile, vol_down)"}}},
            "required": ["orders"]}}},
]  # fmt: skip

SYSTEM = (
    "You trade listed options on one underlying through tools. Each turn: read the chain and "
    "your portfolio, then either submit orders or reply without tools to hold. Orders are "
    "validated all or nothing; a rejection gives its code and you may correct and resubmit a "
    "limited number of times. Prices are per share; one contract is 100 shares."
)


@dataclass
class LLMAgent:
    """A policy for :func:`~fieldrl.apps.options.evaluate.run_episode` backed by a chat
    model. ``base_url`` like ``http://localhost:8000/v1``; the key from ``api_key`` or the
    ``OPENAI_API_KEY`` environment variable."""

    base_url: str
    model: str
    api_key: str | None = None
    max_turns: int = 6
    timeout: float = 60.0
    transcript: list[dict] = field(default_factory=list)
    # it gets the step's OrderDesk (present view, account, order API), not an AgentView
    writes_orders: ClassVar[bool] = True

    def __call__(self, desk: OrderDesk) -> int:
        import httpx

        key = self.api_key or os.environ.get("OPENAI_API_KEY", "none")
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": json.dumps(_situation(desk))}]  # fmt: skip
        with httpx.Client(base_url=self.base_url.rstrip("/"), timeout=self.timeout,
                          headers={"Authorization": f"Bearer {key}"}) as client:  # fmt: skip
            for _ in range(self.max_turns):
                reply = self._complete(client, messages)
                if reply is None:
                    break
                messages.append(reply)
                calls = reply.get("tool_calls") or []
                if not calls:
                    break
                for call in calls:
                    result = self._tool(desk, call)
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                     "content": json.dumps(result)})  # fmt: skip
        self.transcript.append({"time": str(desk.view.market.time), "messages": messages})
        return 0  # orders were placed by the tools; the env then advances

    def _complete(self, client, messages: list[dict]) -> dict | None:
        import httpx

        try:
            response = client.post("/chat/completions", json={
                "model": self.model, "messages": messages, "tools": TOOLS})  # fmt: skip
            response.raise_for_status()
            return response.json()["choices"][0]["message"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise FieldrlError(f"chat endpoint {self.base_url}: {exc}") from None

    def _tool(self, desk: OrderDesk, call: dict) -> object:
        function = call.get("function", {})
        name = function.get("name")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError as exc:
            if name == "submit_orders":
                return [_refused(desk, Rejection(Reject.SCHEMA, f"arguments are not JSON: {exc}"))]
            return {"error": f"arguments are not JSON: {exc}"}
        if not isinstance(arguments, dict):
            return {"error": "arguments must be a JSON object"}
        if name == "get_chain":
            try:
                expiries = int(arguments.get("expiries") or 4)
                strikes = int(arguments.get("strikes") or 6)
            except (TypeError, ValueError):
                return {"error": "expiries and strikes must be whole numbers"}
            return _chain(desk, min(max(expiries, 1), 12), min(max(strikes, 1), 40))
        if name == "get_portfolio":
            return _portfolio(desk)
        if name == "submit_orders":
            orders = arguments.get("orders")
            if not isinstance(orders, list):
                return [_refused(desk, Rejection(Reject.SCHEMA, "orders must be a list"))]
            return [_submit(desk, order) for order in orders]
        return {"error": f"no tool {name!r}; tools: get_chain, get_portfolio, submit_orders"}


def _refused(desk: OrderDesk, rejection: Rejection) -> dict:
    """A schema failure caught before the env: counted as an attempt and a rejection."""
    return {"status": "rejected", **desk.record_rejection(rejection).as_dict()}


def _submit(desk: OrderDesk, data: object) -> dict:
    try:
        order = parse_order(data)
    except Rejection as exc:
        return _refused(desk, exc)
    try:
        fill = desk.submit(order)
    except Rejection as exc:
        return {"status": "rejected", **exc.as_dict()}
    if fill is None:
        return {"status": "not filled", "message": "the limit is not marketable; cancelled"}
    return {"status": "filled", "price": round(fill.price, 4), "fees": round(fill.fees, 2),
            "cash": round(fill.cash, 2)}  # fmt: skip


def _situation(desk: OrderDesk) -> dict:
    market = desk.view.market
    return {"time": str(market.time), "underlying": desk.symbol,
            "spot": round(market.chain(desk.symbol).spot, 2), "portfolio": _portfolio(desk),
            "tries_left": desk.retries_left}  # fmt: skip


def _chain(desk: OrderDesk, expiries: int, strikes: int) -> dict:
    chain = desk.view.market.chain(desk.symbol)
    records, rows = chain.as_records(), []
    for expiry in chain.expiries()[: max(expiries, 1)]:
        same = np.flatnonzero(chain.expiry == np.datetime64(expiry, "D"))
        near = np.unique(chain.strike[same])
        centre = int(np.argmin(np.abs(near - chain.spot)))
        keep = set(near[max(centre - strikes, 0) : centre + strikes + 1])
        rows += [records[i] for i in same if chain.strike[i] in keep]
    return {"time": str(chain.time), "spot": round(chain.spot, 2), "options": rows}


def _portfolio(desk: OrderDesk) -> dict:
    state = desk.account()
    return {"cash": round(state.cash, 2), "nav": round(state.nav, 2),
            "margin_requirement": round(state.margin_requirement, 2),
            "greeks": {k: round(v, 2) for k, v in state.greeks.items()},
            "positions": [{"instrument": k[0], "right": k[1], "strike": k[2],
                           "expiry": str(k[3]) if k[3] else None, "quantity": q}
                          for k, q in state.positions.items()]}  # fmt: skip


class ScriptedServer:
    """A local stand-in for a chat-completions endpoint: answers each POST with the next
    scripted assistant message (a dict with ``content`` and/or ``tool_calls``) and keeps
    the requests it received. Use as ``with ScriptedServer(replies) as url: ...``."""

    def __init__(self, replies: Sequence[dict]) -> None:
        self.replies, self.requests = list(replies), []

    @contextmanager
    def running(self) -> Iterator[str]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(json.loads(self.rfile.read(length)))
                message = (server.replies.pop(0) if server.replies
                           else {"role": "assistant", "content": "hold"})  # fmt: skip
                body = json.dumps({"choices": [{"message": {"role": "assistant", **message}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                return None

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        finally:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> str:
        self._context = self.running()
        return self._context.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)
