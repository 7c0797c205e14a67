"""Environments that ship with cairn, for tests and examples."""

from cairn.envs.connect_four import connect_four_heuristic
from cairn.envs.memory import CueRecall, StatelessCartPole, make_cue_recall, make_stateless_cartpole
from cairn.envs.multi_agent_cartpole import MultiAgentCartPole, make_multi_agent_cartpole
from cairn.envs.pixel_cue import PixelCue, make_pixel_cue

# cairn.envs.atari (make_atari_env) imports ale-py when called; import it from there.
__all__ = ["MultiAgentCartPole", "make_multi_agent_cartpole", "PixelCue", "make_pixel_cue", "CueRecall",
           "make_cue_recall", "StatelessCartPole", "make_stateless_cartpole", "connect_four_heuristic"]
