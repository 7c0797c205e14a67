"""PolicySpec: what a policy is, as data (class, spaces, config); ``Policy.from_spec`` builds it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from cairn.core import PolicyLike
from cairn.policy.custom_model import model_references
from cairn.registry import class_reference
from cairn.space_json import space_from_json, space_to_json

__all__ = ["PolicySpec"]


@dataclass
class PolicySpec:
    """Describes one policy of an algorithm.

    Args:
        policy_class: The Policy subclass (or its reference string). None: the algorithm's
            default policy class.
        observation_space: None: inferred from the environment's agents mapped to the policy.
        action_space: None: inferred likewise.
        config: Overrides of the algorithm's policy settings for this policy only, e.g.
            ``{"lr": 1e-4, "model": {"hidden": [256, 256]}}``.
    """

    policy_class: type[PolicyLike] | str | None = None
    observation_space: gym.Space[Any] | None = None
    action_space: gym.Space[Any] | None = None
    config: dict[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        model = (self.config or {}).get("model")
        if isinstance(model, Mapping):  # model classes -> references, so that the spec is data
            self.config = {**(self.config or {}), "model": model_references(model)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form; spaces become JSON descriptions."""
        cls = self.policy_class
        return {
            "policy_class": class_reference(cls) if isinstance(cls, type) else cls,
            "observation_space": None
            if self.observation_space is None
            else space_to_json(self.observation_space),
            "action_space": None if self.action_space is None else space_to_json(self.action_space),
            "config": copy.deepcopy(self.config),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicySpec:
        """Inverse of :meth:`to_dict` (class references stay strings until the policy is built)."""
        obs, act = data.get("observation_space"), data.get("action_space")
        return cls(
            policy_class=data.get("policy_class"),
            observation_space=None if obs is None else space_from_json(obs),
            action_space=None if act is None else space_from_json(act),
            config=copy.deepcopy(data.get("config")),
        )
