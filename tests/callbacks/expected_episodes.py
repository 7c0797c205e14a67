"""What episode callbacks should have seen, rebuilt from the logs of the environments in
tests/callbacks/emitting.py (each env's own record of what it emitted and received)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any


def canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)


def _by_env(log: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    envs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in log:
        envs[event["env"]].append(event)
    return envs


def _episodes(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """An env's events split at each reset (the part before the first reset is dropped)."""
    episodes: list[list[dict[str, Any]]] = []
    for event in events:
        if event["kind"] == "reset":
            episodes.append([])
        if episodes:
            episodes[-1].append(event)
    return episodes


def single_agent(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each episode that ended: the getters' whole columns, and what -1 showed at its start and
    after each step."""
    expected = []
    for events in _by_env(log).values():
        for episode in _episodes(events):
            reset, steps = episode[0], episode[1:]
            if not steps or not steps[-1]["done"]:
                continue  # cut short by the end of sampling
            record: dict[str, Any] = {
                "observations": [reset["obs"]] + [s["obs"] for s in steps],
                "infos": [reset["info"]] + [s["info"] for s in steps],
                "actions": [s["action"] for s in steps], "rewards": [s["reward"] for s in steps]}
            record["reward_sum"] = sum(record["rewards"])
            record["start"] = {"obs": reset["obs"], "info": reset["info"], "action": None, "reward": None}
            record["steps"] = [{k: s[k] for k in ("obs", "info", "action", "reward")} for s in steps]
            expected.append(record)
    return expected


class _Latest:
    """Per agent: its columns so far, and what index -1 shows of each."""

    def __init__(self) -> None:
        self.columns: dict[str, dict[str, list[Any]]] = {
            c: defaultdict(list) for c in ("observations", "infos", "actions", "rewards")}

    def add(self, column: str, agent: str, value: Any) -> None:
        self.columns[column][agent].append(value)

    def snapshot(self) -> dict[str, Any]:
        def last(column: str) -> dict[str, Any]:
            return {a: v[-1] for a, v in self.columns[column].items() if v}
        return {"obs": last("observations"), "info": last("infos"), "action": last("actions"),
                "reward": last("rewards")}

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {c: dict(v) for c, v in self.columns.items()}
        out["rewards"] = {a: out["rewards"].get(a, []) for a in out["observations"]}
        out["actions"] = {a: out["actions"].get(a, []) for a in out["observations"]}
        out["reward_sum"] = sum(sum(r) for r in out["rewards"].values())
        return out


def parallel(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    expected = []
    for events in _by_env(log).values():
        for episode in _episodes(events):
            reset, steps = episode[0], episode[1:]
            if not steps or not steps[-1]["done"]:
                continue
            latest = _Latest()
            for agent, obs in reset["obs"].items():
                latest.add("observations", agent, obs)
                latest.add("infos", agent, reset["info"][agent])
            start, snapshots = latest.snapshot(), []
            for step in steps:
                for agent, action in step["action"].items():
                    latest.add("actions", agent, action)
                    latest.add("rewards", agent, step["reward"][agent])
                for agent, obs in step["obs"].items():
                    latest.add("observations", agent, obs)
                    latest.add("infos", agent, step["info"][agent])
                snapshots.append(latest.snapshot())
            expected.append({**latest.record(), "start": start, "steps": snapshots})
    return expected


def turn_based(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A game ended when its env was reset again; a selection after the agent's move carries
    that move's reward; on_episode_start runs at the first selection, on_episode_step after
    each move."""
    expected = []
    for events in _by_env(log).values():
        for episode in _episodes(events)[:-1]:  # the last game of each env is still in flight
            latest = _Latest()
            start: dict[str, Any] | None = None
            snapshots = []
            for event in episode[1:]:
                agent = event["agent"]
                if event["kind"] == "selection":
                    if latest.columns["actions"][agent]:
                        latest.add("rewards", agent, event["reward"])
                    latest.add("observations", agent, event["obs"])
                    latest.add("infos", agent, event["info"])
                    start = start or latest.snapshot()
                else:
                    latest.add("actions", agent, event["action"])
                    snapshots.append(latest.snapshot())
            expected.append({**latest.record(), "start": start, "steps": snapshots})
    return expected


def assert_same_episodes(seen: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """The callbacks' records and the envs' are the same episodes (as multisets)."""
    keys = ("observations", "infos", "actions", "rewards", "reward_sum", "start", "steps")
    got = Counter(canonical({k: r[k] for k in keys}) for r in seen)
    want = Counter(canonical({k: r[k] for k in keys}) for r in expected)
    assert len(seen) > 0 and got == want, (len(seen), len(expected), list((got - want).items())[:1],
                                           list((want - got).items())[:1])
