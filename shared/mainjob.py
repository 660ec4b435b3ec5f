"""Demos and the main job (``fieldrl run-all``, behind ``make run``): every app end to end.

An app's demo is run by the core: its ``demo`` preset is trained into ``<out>/<app>/<run>/``,
then the app's ``demo_report`` evaluates the run against its baselines and writes
``report.md`` there. The main job runs every app's demo, starts each service on a free
loopback port, queries it once with the app's example request, and ends with ``index.md``:
one line per app with its headline figure and a link to its report.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from fieldrl.app import App, Resources

if TYPE_CHECKING:
    from fieldrl.runs import LoadedRun

__all__ = ["free_port", "query_once", "run_all"]

console = Console(stderr=True)


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def query_once(api: Any, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Serve ``api`` on loopback, POST ``body`` to ``/v1/act``, stop, return the reply."""
    import httpx
    import uvicorn

    port = free_port()
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


def run_demo(app: App, out: Path, resources: Resources) -> tuple[LoadedRun, str]:
    """Train ``app``'s demo preset into ``out/<app>/<run>/``, then its report; returns the
    trained run and the report's headline."""
    from fieldrl.runs import Run
    from fieldrl.seeding import setup_process

    cfg = app.load_config("demo")
    setup_process(cfg)
    with Run.create(cfg, root=out) as run:
        console.print(f"run folder: {run.dir}", highlight=False, soft_wrap=True)
        app.train(cfg, run=run, resources=resources)
    loaded = app.open_run(run.dir)
    return loaded, app.run_demo_report(loaded, resources=resources)


def run_all(apps: Iterable[App], out_root: Path) -> Path:
    """Demo + one service query per app, then ``index.md`` linking every report."""
    from fieldrl.report import Report
    from fieldrl.serving import create_app

    rows = []
    for app in apps:
        console.rule(f"[bold]{app.name}")
        started = time.monotonic()
        loaded, headline = run_demo(app, out_root, Resources())
        reply = query_once(create_app(app.service(loaded)), app.example_request(loaded))
        shown = str(reply)
        console.print(f"service replied: {shown[:200]}{'...' if len(shown) > 200 else ''}")
        seconds = time.monotonic() - started
        console.print(f"{app.name} done in {seconds:.0f} s")
        report = (loaded.dir / "report.md").relative_to(out_root)
        rows.append({"app": app.name, "headline": headline, "report": f"[{report}]({report})",
                     "seconds": round(seconds)})  # fmt: skip
    index = Report("fieldrl: every app end to end")
    index.text("Each app trained its `demo` preset, was evaluated against its baselines on "
               "held-out work, and answered one request through its HTTP service.")  # fmt: skip
    return index.table(rows).write(out_root / "index.md")
