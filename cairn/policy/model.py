"""The old path of :mod:`cairn.policy.mlp_actor_critic`, kept for users: docs/models.md named
``cairn.policy.model.policy_encoder_description`` before the module was renamed to say what it
holds (issue 38 item 6). New code imports from :mod:`cairn.policy.mlp_actor_critic`."""

from cairn.policy.mlp_actor_critic import policy_encoder_description

__all__ = ["policy_encoder_description"]
