"""PolicySpec: what a policy is, as data (class, spaces, config)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from cairn.errors import ConfigError
from cairn.policy.custom_model import model_references
from cairn.registry import class_reference, resolve_class
from cairn.spaces import space_from_json, space_to_json

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

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

    policy_class: type[Policy] | str | None = None
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

    def build(self, *, default_class: type[Policy], base: type[Policy], seed: int | None = None) -> Policy:
        """A new policy of this spec (``Policy.from_spec``): its class, else ``default_class``; a
        class reference must resolve to a subclass of ``base``. Both spaces must be given."""
        policy_class = self.policy_class or default_class
        if isinstance(policy_class, str):
            policy_class = resolve_class(policy_class, base)
        if self.observation_space is None or self.action_space is None:
            raise ConfigError(
                "PolicySpec needs observation_space and action_space to build a policy on its own."
            )
        return policy_class(self.observation_space, self.action_space, self.config, seed=seed)

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
