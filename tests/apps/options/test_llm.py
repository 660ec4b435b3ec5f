"""The LLM adapter end to end against the scripted stand-in server: tool calls, a reply
that is not JSON, an invalid leg, a retry that succeeds, the retry cap, and holding."""

import json

import numpy as np
import pytest

from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import run_episode
from fieldrl.apps.options.llm import LLMAgent, ScriptedServer
from fieldrl.errors import FieldrlError


def call(name, arguments, i=0):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"tool_calls": [{"id": f"c{i}", "type": "function",
                            "function": {"name": name, "arguments": text}}]}  # fmt: skip


@pytest.fixture
def env():
    cfg = OptionsConfig(suite={"episode_days": 3, "max_retries": 2})
    return OptionsEnv(cfg, make_episodes(cfg, "eval", 1))


def listed_leg(env):
    env.reset(seed=0, options={"episode": 0})
    chain = env.view().chain("SYN")
    row = int(np.flatnonzero(chain.call)[np.argmin(np.abs(chain.strike[chain.call] - chain.spot))])
    return {"right": "call", "strike": float(chain.strike[row]), "expiry": str(chain.expiry[row]),
            "side": "buy", "quantity": 1}  # fmt: skip


def test_the_protocol_counts_validity_and_retries(env):
    leg = listed_leg(env)
    bad_leg = {**leg, "strike": leg["strike"] + 0.5}
    replies = [
        call("get_chain", {"expiries": 2, "strikes": 2}),
        call("get_portfolio", {}),
        call("submit_orders", "{not json"),
        call("submit_orders", {"orders": [{"underlying": "SYN", "legs": [bad_leg]}]}),
        call(
            "submit_orders", {"orders": [{"underlying": "SYN", "legs": [leg], "view": "bullish"}]}
        ),  # fmt: skip
        {"content": "done for today"},
    ]
    server = ScriptedServer(replies)
    with server as url:
        record = run_episode(env, LLMAgent(url, "scripted"), 0)
    assert record.attempts == 3 and record.fills >= 1
    assert record.rejections == {"schema_invalid": 1, "unlisted_contract": 1}
    assert record.retries_to_valid == [2] and record.consistent == [True]
    sent = server.requests
    assert sent[0]["model"] == "scripted" and [t["function"]["name"] for t in sent[0]["tools"]] == [
        "get_chain",
        "get_portfolio",
        "submit_orders",
    ]
    answers = [json.loads(m["content"]) for m in sent[4]["messages"] if m["role"] == "tool"]
    options = answers[0]["options"]
    assert len({o["expiry"] for o in options}) == 2 and len(options) <= 2 * 2 * 5
    assert answers[1]["cash"] == 100_000.0 and answers[1]["positions"] == []
    assert answers[2][0]["code"] == "schema_invalid"
    assert answers[3][0]["code"] == "unlisted_contract" and answers[3][0]["leg"] == 0
    final = [json.loads(m["content"]) for m in sent[5]["messages"] if m["role"] == "tool"]
    assert final[-1][0]["status"] == "filled"


def test_retries_are_capped_each_step(env):
    leg = listed_leg(env)
    bad = call("submit_orders", {"orders": [{"underlying": "SYN", "legs": [
        {**leg, "quantity": 0.5}]}]})  # fmt: skip
    with ScriptedServer([bad, bad, bad, bad, {"content": "hold"}]) as url:
        record = run_episode(env, LLMAgent(url, "scripted"), 0)
    assert record.rejections == {"bad_quantity": 3, "retries_exhausted": 1}
    assert record.attempts == 3 and record.fills == 0


def test_an_unreachable_endpoint_is_a_clear_error(env):
    env.reset(seed=0, options={"episode": 0})
    agent = LLMAgent("http://127.0.0.1:9/v1", "none", timeout=1.0)
    with pytest.raises(FieldrlError, match="chat endpoint"):
        agent(env.order_desk())


def test_odd_tool_arguments_get_an_error_not_a_crash(env):
    replies = [call("get_chain", {"expiries": None, "strikes": "four"}),
               call("get_chain", "[1, 2]"), {"content": "hold"}]  # fmt: skip
    server = ScriptedServer(replies)
    with server as url:
        run_episode(env, LLMAgent(url, "scripted"), 0)
    answers = [json.loads(m["content"]) for m in server.requests[2]["messages"]
               if m["role"] == "tool"]  # fmt: skip
    assert "whole numbers" in answers[0]["error"] and "JSON object" in answers[1]["error"]
