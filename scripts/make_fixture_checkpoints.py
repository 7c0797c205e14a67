"""Write the frozen fixture checkpoints of the current format version.

    python scripts/make_fixture_checkpoints.py

Writes tests/fixtures/checkpoints/<FORMAT_VERSION>/{ppo_single,ppo_multi,policy}/. Run it once
per format version, commit the output, and never regenerate an existing version: the fixtures
prove that checkpoints written by earlier releases keep loading. The script refuses to
overwrite an existing version folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cairn
from cairn.checkpoint.format import FORMAT_VERSION
from cairn.envs import make_multi_agent_cartpole

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "model": {"hidden": [16, 16]}}


def main() -> int:
    out = ROOT / "tests" / "fixtures" / "checkpoints" / FORMAT_VERSION
    if out.exists():
        print(f"{out} exists; fixtures of a released format version are never regenerated.")
        return 1
    single = (cairn.PPOConfig().environment("CartPole-v1").training(**SMALL)
              .env_runners(observation_filter="MeanStdFilter").debugging(seed=0).build())
    single.train()
    single.save(out / "ppo_single")
    single.get_policy().export_checkpoint(out / "policy")

    multi = (cairn.PPOConfig()
             .environment(make_multi_agent_cartpole, env_config={"num_agents": 3})
             .training(**SMALL)
             .multi_agent(policies=["p0", "p1", "p2"],
                          policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", "agent_2": "p2"})
             .debugging(seed=0).build())
    multi.train()
    multi.save(out / "ppo_multi")
    print(f"wrote fixtures to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
