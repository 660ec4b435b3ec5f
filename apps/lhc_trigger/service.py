"""The threshold service: POST a window summary (or several) for a stream, get the next
threshold. The service keeps each stream's previous window, so it rejects windows that
arrive out of order or for an unknown trigger."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Literal

from pydantic import Field

from fieldrl.apps.lhc_trigger.controllers import GuardState, RunawayGuard
from fieldrl.apps.lhc_trigger.env import History, Measured, OutOfOrder
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["example_request", "request_variant", "service"]

MAX_STREAMS = 10_000


MAX_THRESHOLD = 1e6  # in the trigger's units (HT in GeV, an anomaly score): far past any menu


class WindowSummary(RequestModel):
    """What the online system measured in one window, with the threshold it applied."""

    index: int = Field(..., ge=0, le=2**31 - 1, description="Window number within the stream.")
    threshold: float = Field(
        ..., ge=-MAX_THRESHOLD, le=MAX_THRESHOLD, description="Threshold applied to this window."
    )
    rate: float = Field(..., ge=0, le=1, description="Accepted fraction of events.")
    target_threshold: float = Field(
        ...,
        ge=-MAX_THRESHOLD,
        le=MAX_THRESHOLD,
        description="Threshold that would have accepted the target rate in this window.",
    )
    band_width: float = Field(
        ...,
        ge=0,
        le=MAX_THRESHOLD,
        description="Threshold distance between the band edges in this window.",
    )
    npv_mean: float = Field(..., ge=0, le=1000, description="Mean number of primary vertices.")
    multijet_fraction: float = Field(
        ..., ge=0, le=1, description="Fraction of events with >= 4 jets above 30 GeV."
    )


class ThresholdRequest(RequestModel):
    stream_id: str = Field(..., min_length=1, max_length=128, pattern=r"^[\w.:-]+$")
    trigger: Literal["ht", "ad"]
    windows: list[WindowSummary] = Field(..., min_length=1, max_length=1000)


class ThresholdResponse(ResponseModel):
    stream_id: str
    trigger: str
    controller: str
    next_window: int
    next_threshold: float
    thresholds: list[float] = Field(description="The decision after each window sent.")
    guarded: list[bool] = Field(
        description="Whether the runaway guard's fallback made each decision (guard.enabled)."
    )
    guard_interventions: int = Field(description="The guard's take-overs on this stream so far.")


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's controllers; one state per (stream, trigger)."""
    trained, cfg = run.trained, run.config
    controllers = {t: trained.controller_for(t, cfg) for t in trained.calibrations}
    for trigger, controller in controllers.items():
        controller.reset(trained.calibrations[trigger])
    streams: OrderedDict[tuple[str, str], tuple[History, GuardState]] = OrderedDict()
    lock = threading.Lock()

    def act(request: ThresholdRequest) -> ThresholdResponse:
        if request.trigger not in controllers:
            raise InputError("trigger", f"this run has no {request.trigger!r} controller")
        key = (request.stream_id, request.trigger)
        controller = controllers[request.trigger]
        thresholds, guarded = [], []
        with lock:
            history, guard = streams.get(key) or (History(), GuardState())
            trial = History()  # a bad window anywhere leaves the stream's state untouched
            trial.items.extend(history.items)
            if isinstance(controller, RunawayGuard):
                controller.state = replace(guard)
            for i, window in enumerate(request.windows):
                try:
                    obs = trial.push(Measured(**window.model_dump()))
                except OutOfOrder as exc:
                    raise InputError(
                        f"windows.{i}.index", f"stream {request.stream_id!r}: {exc}"
                    ) from None
                decision = controller.decide(obs)
                if not math.isfinite(decision):
                    raise InputError(f"windows.{i}", "the controller's decision is not a "
                                     "finite number for these measurements")  # fmt: skip
                thresholds.append(decision)
                guarded.append(getattr(controller, "guarding", False))
            if isinstance(controller, RunawayGuard):
                guard = controller.state
            streams[key] = (trial, guard)
            streams.move_to_end(key)
            while len(streams) > MAX_STREAMS:
                streams.popitem(last=False)
        # the same bounded move the replay applies
        step = cfg.control.max_step * trained.calibrations[request.trigger].menu
        final = request.windows[-1]
        bounded = [
            min(max(h, w.threshold - step), w.threshold + step)
            for h, w in zip(thresholds, request.windows, strict=True)
        ]
        return ThresholdResponse(
            stream_id=request.stream_id,
            trigger=request.trigger,
            controller=trained.controller,
            next_window=final.index + 1,
            next_threshold=bounded[-1],
            thresholds=bounded,
            guarded=guarded,
            guard_interventions=guard.interventions,
        )

    return ServiceSpec.for_run(
        run,
        ThresholdRequest,
        ThresholdResponse,
        act,
        info={
            "controller": trained.controller,
            "triggers": sorted(controllers),
            "menu": {t: c.menu for t, c in trained.calibrations.items()},
            "target_rate": cfg.control.target_rate,
            "band": cfg.control.band,
            "guard": cfg.guard.model_dump() if trained.policies else None,
        },
    )


def example_request(run: LoadedRun) -> dict:
    """One valid request: the first window of a stream, on target, at the menu threshold."""
    trained = run.trained
    trigger, calib = next(iter(trained.calibrations.items()))
    return {
        "stream_id": "fill-0001",
        "trigger": trigger,
        "windows": [
            {
                "index": 0,
                "threshold": calib.menu,
                "rate": 0.0025,
                "target_threshold": calib.menu,
                "band_width": 0.05 * calib.menu,
                "npv_mean": calib.npv_ref,
                "multijet_fraction": calib.multijet_ref,
            }
        ],
    }


def request_variant(body: dict, n: int) -> dict:
    """The example's first window for the n-th new stream: a stream accepts each window
    once, so the load test opens a stream per request."""
    return dict(body, stream_id=f"load-{n}")
