"""The Ray backend (the ``distributed`` extra): parallel work, sweeps and Ray Serve.

Everything here also runs without Ray: one worker means in-process, and a sweep without
Ray runs its grid one trial after another. ``address=None`` starts a local Ray with as
many CPUs as workers; ``address="ray://host:10001"`` or ``"auto"`` joins a cluster.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from fieldrl.config import ConfigError
from fieldrl.errors import FieldrlError
from fieldrl.runs import progress

__all__ = [
    "WorkerPool",
    "grid",
    "has_ray",
    "parallel_map",
    "ray_session",
    "run_sweep",
    "serve_with_ray",
]

_MISSING = "needs the distributed extra (Ray): pip install 'fieldrl[distributed]'"


def has_ray() -> bool:
    """Whether Ray is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray(what: str) -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError(f"{what} {_MISSING}") from None
    return ray


@contextmanager
def ray_session(workers: int, address: str | None = None) -> Iterator[Any]:
    """Ray for ``workers`` (local) or joined to ``address``; shut down if we started it."""
    ray = _ray(f"--workers {workers}")
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


class _Worker:
    """Holds one object built by ``factory(index)`` and calls its methods."""

    def __init__(self, factory: Callable[[int], Any], index: int) -> None:
        import torch

        torch.set_num_threads(1)
        self.target = factory(index)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.target, method)(*args, **kwargs)


class WorkerPool:
    """``workers`` stateful workers (e.g. rollout collectors), Ray actors when ``workers > 1``.

    ``factory(i)`` builds worker i's object; :meth:`broadcast` calls a method on all of them
    with the same arguments and returns their results in worker order.
    """

    def __init__(
        self, factory: Callable[[int], Any], workers: int = 1, address: str | None = None
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._session = None
        if workers == 1 and address is None:
            self._local = [factory(0)]
            return
        self._session = ray_session(workers, address)
        ray = self._session.__enter__()
        actor = ray.remote(num_cpus=1)(_Worker)
        self._ray = ray
        self._actors = [actor.remote(factory, i) for i in range(workers)]

    def broadcast(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method(*args, **kwargs)`` on every worker; results in worker order."""
        if self._session is None:
            return [getattr(self._local[0], method)(*args, **kwargs)]
        refs = [a.call.remote(method, *args, **kwargs) for a in self._actors]
        return self._ray.get(refs)

    def close(self) -> None:
        if self._session is not None:
            for actor in self._actors:
                self._ray.kill(actor)
            self._session.__exit__(None, None, None)
            self._session = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_with_one_thread(fn: Callable[[Any], Any], item: Any) -> Any:
    import torch

    torch.set_num_threads(1)
    return fn(item)


def parallel_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int = 1,
    address: str | None = None,
    description: str | None = None,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(x) for x in items]``, spread over Ray workers when ``workers > 1``; order kept.
    With a ``description`` it shows the finished items as a progress bar (or log lines);
    ``on_result(index, result)`` is called as each item finishes (e.g. to save it, so that
    a long map killed halfway can skip what it already has)."""
    done = on_result or (lambda i, r: None)
    with progress(len(items), description) if description else nullcontext(_ignore) as advance:
        if workers <= 1 and address is None:
            results = []
            for i, item in enumerate(items):
                results.append(fn(item))
                done(i, results[-1])
                advance()
            return results
        with ray_session(workers, address) as ray:
            task = ray.remote(num_cpus=1)(_call_with_one_thread)
            refs = [task.remote(fn, item) for item in items]
            index = {ref: i for i, ref in enumerate(refs)}
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    done(index[ref], ray.get(ref))
                advance(len(ready))
            return ray.get(refs)


def _ignore(n: float = 1) -> None:
    """The ``advance`` of a map without a progress display."""


def grid(space: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of a ``{key: [values]}`` search space."""
    keys = list(space)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*space.values())]


def run_sweep(
    trial: Callable[[dict[str, Any]], dict[str, float]],
    space: Mapping[str, Sequence[Any]],
    *,
    metric: str,
    mode: str = "max",
    workers: int = 1,
    address: str | None = None,
    storage: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``trial(params) -> metrics`` over the grid ``space``; rows sorted best first.

    With Ray installed the trials run on Ray Tune, ``workers`` at a time; otherwise in turn.
    Each row is ``{"params": {...}, **metrics}``; a trial that fails is a row
    ``{"params": {...}, "error": "<its error, one line>"}`` after the others, and the
    sweep fails (naming the first error) only if every trial did.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    guarded = functools.partial(_guarded, trial)
    if has_ray() and (workers > 1 or address is not None):
        rows = _tune_sweep(guarded, space, metric, mode, workers, address, storage)
    else:
        rows = [{"params": params, **guarded(params)} for params in grid(space)]
    failed = [r for r in rows if "error" in r]
    if len(failed) == len(rows):
        raise FieldrlError(f"every sweep trial failed; the first, {failed[0]['params']}: "
                           f"{failed[0]['error']}")  # fmt: skip
    missing = [r["params"] for r in rows if "error" not in r and metric not in r]
    if missing:
        raise ConfigError(f"sweep metric {metric!r} not reported by trials {missing}")
    done = [r for r in rows if "error" not in r]
    return [*sorted(done, key=lambda r: r[metric], reverse=(mode == "max")), *failed]


def _guarded(trial: Callable[[dict[str, Any]], dict[str, float]],
             params: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """A trial's metrics, or its error in one line (a failed trial does not end the sweep)."""
    try:
        return trial(params)
    except Exception as exc:  # noqa: BLE001 (any failure of one trial is reported, not raised)
        lines = str(exc).strip().splitlines() or [""]
        return {"error": f"{type(exc).__name__}: {lines[0]}"}


def _tune_sweep(
    trial: Callable[[dict[str, Any]], dict[str, float]],
    space: Mapping[str, Sequence[Any]],
    metric: str,
    mode: str,
    workers: int,
    address: str | None,
    storage: str | None,
) -> list[dict[str, Any]]:
    from ray import tune

    def trainable(params: dict[str, Any]) -> None:
        tune.report(dict(_call_with_one_thread(trial, params)))

    with ray_session(workers, address):
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={key: tune.grid_search(list(values)) for key, values in space.items()},
            tune_config=tune.TuneConfig(metric=metric, mode=mode, max_concurrent_trials=workers),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        )
        results = tuner.fit()
        rows = []
        for result in results:
            metrics = {k: v for k, v in result.metrics.items()
                       if isinstance(v, int | float) or k == "error"}  # fmt: skip
            rows.append({"params": dict(result.config), **metrics})
        return rows


def serve_with_ray(
    build_api: Callable[[], Any],
    replicas: int = 1,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
    block: bool = True,
) -> None:
    """Deploy the FastAPI app made by ``build_api`` on Ray Serve with ``replicas`` replicas.

    ``build_api`` runs on each replica, so the model is loaded there, not pickled across.
    """
    _ray("serve --ray")
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(
            address=address,
            num_cpus=None if address else max(replicas, 1),
            include_dashboard=False,
            log_to_driver=False,
        )
    serve.start(http_options={"host": host, "port": port})
    deployment = serve.deployment(num_replicas=replicas, name="fieldrl")(serve.ingress(build_api)())
    serve.run(deployment.bind(), name="fieldrl", route_prefix="/", blocking=block)
