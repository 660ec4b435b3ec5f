"""Mean-field battles: MF-MAPPO for zero-sum team games with thousands of agents per team,
on analytic population games (exact equilibria, exploitability) and a grid battlefield.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``: the scenario, learner, observation, eval and benchmark sections;
- ``games``, ``battlefield``: the environments (``pettingzoo_env``: a PettingZoo view);
- ``policy``, ``rollout``, ``mf_mappo``, ``mfq``: the networks, how a team acts, the
  algorithms; ``baselines``: scripted teams and cross-play;
- ``pipeline``: ``train``, ``load``, ``evaluate`` (and the scenario builders);
- ``service``: ``service``, ``example_request``; ``benchmark`` (``scaling``): the benchmark;
  ``report``: its sections and the demo.
"""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App
from fieldrl.apps.battles.config import BattlesConfig

APP = App(
    summary="MF-MAPPO for zero-sum team battles and population games with thousands of agents.",
    config_model=BattlesConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="validation_win_rate",
    units={
        "win_rate": "share of battles",
        "exploitability": "payoff",
        "noise_floor": "payoff",
        "tv_distance": "TV distance",
    },
    status="ready (issue 5; cross-play target missed, see docs)",
    data_key="eval.opponents",
    data_flag="--opponent",
    data_help="Opponent(s): random, rush, focus, or a trained run folder (repeatable), e.g. "
    "--opponent focus --opponent runs/battles/<run>.",
)
