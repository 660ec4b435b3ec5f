"""Loopback load figures for a service: the run is served in its own process, exactly as
``fieldrl <app> serve`` serves it, and N clients each POST the app's example request back to
back over a keep-alive connection."""

from __future__ import annotations

import http.client
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fieldrl.errors import FieldrlError
from fieldrl.mainjob import free_port
from fieldrl.serving import TOKEN_ENV

__all__ = ["load_test", "measure"]


def measure(
    port: int, body: Callable[[], bytes], *, clients: int, seconds: float, token: str
) -> dict:
    """``clients`` threads POST ``body()`` (called for every request) to ``/v1/act`` for
    ``seconds``: requests/s, p50 and p99 latency (ms) and the count of non-200 answers."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < stop:
            payload = body()
            start = time.perf_counter()
            connection.request("POST", "/v1/act", payload, headers)
            reply = connection.getresponse()
            reply.read()
            latencies[i].append(time.perf_counter() - start)
            errors[i] += reply.status != 200
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    every = np.concatenate([np.asarray(x) for x in latencies]) * 1000
    return {"clients": clients, "requests": int(every.size),
            "requests_per_s": every.size / elapsed,
            "p50_ms": float(np.percentile(every, 50)), "p99_ms": float(np.percentile(every, 99)),
            "errors": sum(errors), "body_bytes": len(body())}  # fmt: skip


def load_test(
    app: str, run_dir: Path, body: Callable[[], bytes], *, clients: Sequence[int],
    seconds: float,
) -> list[dict]:  # fmt: skip
    """Serve ``run_dir`` with ``fieldrl <app> serve`` (token set, a free loopback port) and
    :func:`measure` it at each number of ``clients`` sending ``body()``."""
    port, token = free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "fieldrl.cli", app, "serve", "--run", str(run_dir),
               "--port", str(port)]  # fmt: skip
    log = tempfile.TemporaryFile("w+")  # the server's stderr, shown if it fails to start
    env = {**os.environ, TOKEN_ENV: token}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                log.seek(0)
                raise FieldrlError(f"the service did not start: {log.read()[-2000:]}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/healthz")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise FieldrlError("the service did not start within 120 s") from None
                time.sleep(0.2)
        measure(port, body, clients=1, seconds=min(1.0, seconds), token=token)  # warm-up
        return [measure(port, body, clients=n, seconds=seconds, token=token) for n in clients]
    finally:
        server.terminate()
        server.wait(30)
        log.close()
