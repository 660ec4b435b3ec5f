"""Extra verbs of ``fieldrl options``: ``play`` (any baseline, or an LLM at an
OpenAI-compatible endpoint, on held-out episodes of a suite, no run needed) and ``agents``
(the baselines ``play`` knows)."""

from pathlib import Path
from typing import Annotated

import typer

from fieldrl.app import App
from fieldrl.cli_types import ConfigFile, Overrides, Preset, console, friendly


def add_commands(cli: typer.Typer, app: App) -> None:
    @cli.command(epilog="Example: fieldrl options play --agent iron_condor_16d --episodes 4")
    @friendly
    def play(
        agent: Annotated[str, typer.Option(help="A baseline (see `agents`), or `llm`.")],
        episodes: Annotated[int, typer.Option(min=1, help="Held-out episodes.")] = 8,
        llm_url: Annotated[
            str | None, typer.Option(help="agent llm: the endpoint, e.g. http://host:8000/v1")
        ] = None,
        llm_model: Annotated[str, typer.Option(help="agent llm: the model name.")] = "local",
        out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Play one agent on held-out episodes of the config's suite and print its metrics
        (validity, risk, outcome) with bootstrap CIs."""
        from fieldrl.apps.options.baselines import policy_for
        from fieldrl.apps.options.env import OptionsEnv
        from fieldrl.apps.options.episodes import make_episodes
        from fieldrl.apps.options.evaluate import run_episode, summary
        from fieldrl.atomic import atomic_write_json
        from fieldrl.config import ConfigError

        cfg = app.load_config(preset, config, list(set_ or []))
        if agent == "llm":
            if not llm_url:
                raise ConfigError("--agent llm needs --llm-url (an OpenAI-compatible endpoint)")
            from fieldrl.apps.options.llm import LLMAgent

            policy = LLMAgent(llm_url, llm_model)
        else:
            policy = policy_for(agent)
        chosen = make_episodes(cfg, "eval", episodes, 0)
        env = OptionsEnv(cfg, chosen)
        figures = summary([run_episode(env, policy, e) for e in range(len(chosen))])
        for key, value in figures.items():
            console.print(f"{key:28} {value:12.4g}", highlight=False)
        if out is not None:
            atomic_write_json(out, {"agent": agent, "episodes": [e.key for e in chosen],
                                    "metrics": figures})  # fmt: skip

    @cli.command(epilog="Example: fieldrl options agents")
    def agents() -> None:
        """The baselines `play` knows (and `llm`)."""
        from fieldrl.apps.options.baselines import AGENTS

        for name in [*AGENTS, "llm"]:
            typer.echo(name)
