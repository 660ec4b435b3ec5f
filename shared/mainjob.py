"""The main job (``fieldrl run-all``, behind ``make run``): every app end to end.

Each app runs its demo (train, evaluate against baselines, report), then its service is
started on a free loopback port and queried once over HTTP with the app's example request.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from fieldrl.app import App, Resources

__all__ = ["query_once", "run_all"]

console = Console(stderr=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def query_once(api: Any, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Serve ``api`` on loopback, POST ``body`` to ``/v1/act``, stop, return the reply."""
    import httpx
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        httpx.get(f"{base}/healthz", timeout=timeout).raise_for_status()
        reply = httpx.post(f"{base}/v1/act", json=body, timeout=timeout)
        reply.raise_for_status()
        return reply.json()
    finally:
        server.should_exit = True
        thread.join(timeout)


def run_all(apps: Iterable[App], out_root: Path) -> list[Path]:
    """Demo + one service query per app; returns the report paths."""
    from fieldrl.serving import create_app

    reports = []
    for app in apps:
        console.rule(f"[bold]{app.name}")
        started = time.monotonic()
        run_dir = app.demo(out_root, Resources())
        loaded = app.open_run(run_dir)
        reply = query_once(create_app(app.service(loaded)), app.example_request(loaded))
        shown = str(reply)
        console.print(f"service replied: {shown[:200]}{'...' if len(shown) > 200 else ''}")
        console.print(f"{app.name} done in {time.monotonic() - started:.0f} s")
        reports.append(run_dir / "report.md")
    return reports
