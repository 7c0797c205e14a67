"""PolicySpec: what a policy is, as data (class, spaces, config); ``Policy.from_spec`` builds it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from cairn.core import PolicyLike
from cairn.errors import ConfigError
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

    #: The ConfigError message for setting an attribute of this spec: set on a
    #: :meth:`read_only_copy`, None (changeable) otherwise. Not a field: equality and
    #: ``to_dict`` ignore it.
    read_only_refusal: ClassVar[str | None] = None

    def __setattr__(self, name: str, value: Any) -> None:
        if self.read_only_refusal is not None:
            raise ConfigError(self.read_only_refusal)
        super().__setattr__(name, value)

    def read_only_copy(
        self, config: dict[str, Any] | None, refusal: str,
        spaces: tuple[gym.Space[Any] | None, gym.Space[Any] | None] | None = None,
    ) -> PolicySpec:
        """This spec with ``config`` (a read-only form of its own, as a frozen
        ``AlgorithmConfig`` holds its policies) and ``spaces`` (observation and action space:
        read-only copies of its own; None keeps its own), whose attributes cannot be set:
        setting one raises ConfigError(``refusal``). A ``copy.copy``/``copy.deepcopy`` of it is
        changeable."""
        spec = PolicySpec.__new__(PolicySpec)
        spec.__dict__.update(self.__dict__, config=config, read_only_refusal=refusal)
        if spaces is not None:
            spec.__dict__.update(observation_space=spaces[0], action_space=spaces[1])
        return spec

    def __copy__(self) -> PolicySpec:
        spec = type(self).__new__(type(self))
        spec.__dict__.update({k: v for k, v in self.__dict__.items() if k != "read_only_refusal"})
        return spec

    def __deepcopy__(self, memo: dict[int, Any]) -> PolicySpec:
        spec = type(self).__new__(type(self))
        memo[id(self)] = spec
        spec.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()
                              if k != "read_only_refusal"})
        return spec

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
