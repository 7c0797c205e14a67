"""V-trace against the paper's eq. 1 written out here as a double sum, and against cairn's GAE
on-policy, on fragments laid out as cairn's runners lay them out (SampleBatch.from_time_major,
bootstrap values from PPO's next_values)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cairn.algorithms.impala.vtrace import vtrace
from cairn.algorithms.ppo import compute_gae
from cairn.algorithms.ppo.learn import next_values
from cairn.env_runner.sample_batch import SampleBatch


class _ValueOfObs(torch.nn.Module):
    """A value function that reads V(x) off the observation, so that a test chooses the value of
    every final observation (the bootstrap values) and PPO's own next_values fetches them."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, 0]


def _fragment(seed: int, steps: int, n_envs: int, dtype: type = np.float64) -> dict[str, np.ndarray]:
    """Time-major ``[steps, n_envs]`` columns of a random fragment: values, rewards, log-probs,
    and episode ends in the middle and at the end. Env 0 terminates on its last step, env 1 is
    truncated on it, env 2 terminates and is truncated in the middle, env 3 is terminated and
    truncated at once; more ends at random. ``final_values`` is V of each step's final
    observation (read where an episode is truncated or the fragment ends)."""
    rng = np.random.default_rng(seed)
    term = rng.random((steps, n_envs)) < 0.15
    trunc = rng.random((steps, n_envs)) < 0.15
    term[-1, 0], trunc[-1, 0] = True, False
    term[-1, 1], trunc[-1, 1] = False, True
    if steps >= 3:
        term[steps // 3, 2], trunc[steps // 3, 2] = True, False
        term[2 * steps // 3, 2], trunc[2 * steps // 3, 2] = False, True
    term[steps // 2, 3] = trunc[steps // 2, 3] = True
    return {
        "rewards": rng.normal(size=(steps, n_envs)).astype(dtype),
        "values": rng.normal(size=(steps, n_envs)).astype(dtype),
        "final_values": rng.normal(loc=3.0, size=(steps, n_envs)).astype(np.float32).astype(dtype),
        # Log-ratios of about e^{+-2}: the clip thresholds below fall among the ratios.
        "behaviour_logp": rng.normal(size=(steps, n_envs)).astype(dtype) - 1.0,
        "target_logp": rng.normal(size=(steps, n_envs)).astype(dtype) - 1.0,
        "terminateds": term,
        "truncateds": trunc,
    }


def _vtrace_inputs(frag: dict[str, np.ndarray]) -> tuple[SampleBatch, dict[str, torch.Tensor]]:
    """The fragment as a cairn batch, and vtrace's inputs from it. Each row's next observation
    holds V of that observation (the next row's value inside a piece, the final value at a piece
    end), and PPO's next_values computes the bootstrap values from it."""
    next_v = np.concatenate([frag["values"][1:], frag["final_values"][-1:]])
    next_v = np.where(frag["terminateds"] | frag["truncateds"], frag["final_values"], next_v)
    batch = SampleBatch.from_time_major(
        obs=frag["values"][..., None].astype(np.float32), next_obs=next_v[..., None].astype(np.float32),
        **{k: frag[k] for k in ("rewards", "terminateds", "truncateds", "values", "behaviour_logp",
                                "target_logp")})
    next_vals = next_values(_ValueOfObs(), batch, batch["values"])
    # Past a termination there is no value: whatever a caller leaves there must be ignored.
    next_vals[batch["terminateds"]] = 123.0
    inputs = {k: torch.from_numpy(batch[k]) for k in ("behaviour_logp", "target_logp", "rewards", "values",
                                                      "terminateds", "ends")}
    inputs["next_values"] = torch.from_numpy(next_vals)
    return batch, inputs


def _time_major(x: torch.Tensor, steps: int, n_envs: int) -> np.ndarray:
    """An env-major column back in ``[steps, n_envs]``."""
    return x.numpy().reshape(n_envs, steps).T


def _reference(frag: dict[str, np.ndarray], *, gamma: float, lambda_: float, rho_bar: float | None,
               pg_rho_bar: float | None, c_bar: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Espeholt et al. 2018, eq. 1, as written: for each s of each env's trajectory,
    ``v_s = V(x_s) + sum_{t=s}^{end} gamma^{t-s} (prod_{i=s}^{t-1} c_i) rho_t (r_t + gamma
    V(x_{t+1}) - V(x_t))``, the sum stopping at the episode's end or the fragment's; past a
    termination V is 0, past a truncation or the fragment's end V is the final observation's.
    And the policy gradient's ``min(pg_rho_bar, ratio_s) (r_s + gamma v_{s+1} - V(x_s))``."""
    ratio = np.exp(frag["target_logp"] - frag["behaviour_logp"])
    names = ("rewards", "values", "final_values", "terminateds", "truncateds")
    per_env = [_reference_one_env(*[frag[k][:, b].tolist() for k in names], ratio[:, b].tolist(),
                                  gamma=gamma, lambda_=lambda_, rho_bar=rho_bar, pg_rho_bar=pg_rho_bar,
                                  c_bar=c_bar)
               for b in range(ratio.shape[1])]
    return np.array([vs for vs, _ in per_env]).T, np.array([pg for _, pg in per_env]).T


def _reference_one_env(r: list[float], v: list[float], final_v: list[float], term: list[bool],
                       trunc: list[bool], ratio: list[float], *, gamma: float, lambda_: float,
                       rho_bar: float | None, pg_rho_bar: float | None,
                       c_bar: float) -> tuple[list[float], list[float]]:
    """:func:`_reference` for one env's steps."""
    steps = len(r)

    def end_of(s: int) -> int:
        t = s
        while not (term[t] or trunc[t] or t == steps - 1):
            t += 1
        return t

    def v_next(t: int, end: int) -> float:
        """V(x_{t+1}) for t within the piece ending at ``end``."""
        if t < end:
            return v[t + 1]
        return 0.0 if term[end] else final_v[end]

    rho = [ratio[t] if rho_bar is None else min(rho_bar, ratio[t]) for t in range(steps)]
    c = [lambda_ * min(c_bar, ratio[t]) for t in range(steps)]
    vs = []
    for s in range(steps):
        end = end_of(s)
        total = v[s]
        for t in range(s, end + 1):
            delta = rho[t] * (r[t] + gamma * v_next(t, end) - v[t])
            total += gamma ** (t - s) * math.prod(c[s:t]) * delta
        vs.append(total)
    pg = []
    for s in range(steps):
        end = end_of(s)
        vs_next = vs[s + 1] if s < end else v_next(end, end)
        pg_rho = ratio[s] if pg_rho_bar is None else min(pg_rho_bar, ratio[s])
        pg.append(pg_rho * (r[s] + gamma * vs_next - v[s]))
    return vs, pg


@pytest.mark.parametrize("steps", [1, 2, 7, 20])
@pytest.mark.parametrize(("rho_bar", "pg_rho_bar", "lambda_"), [
    (1.0, 1.0, 1.0),  # RLlib's defaults
    (0.5, 2.0, 1.0),  # rho_bar below most ratios, the pg clip above most
    (3.0, 0.3, 0.9),  # and the other way round, with lambda
    (None, None, 1.0),  # no clip
])
def test_vtrace_equals_the_papers_sum(steps, rho_bar, pg_rho_bar, lambda_):
    n_envs, gamma = 4, 0.93
    frag = _fragment(seed=steps, steps=steps, n_envs=n_envs)
    _, inputs = _vtrace_inputs(frag)
    out = vtrace(**inputs, gamma=gamma, lambda_=lambda_, clip_rho_threshold=rho_bar,
                 clip_pg_rho_threshold=pg_rho_bar)
    vs, pg = _reference(frag, gamma=gamma, lambda_=lambda_, rho_bar=rho_bar, pg_rho_bar=pg_rho_bar)
    np.testing.assert_allclose(_time_major(out.vs, steps, n_envs), vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_time_major(out.pg_advantages, steps, n_envs), pg, rtol=1e-10, atol=1e-10)
    if steps >= 7:
        # The case means something: thresholds sit among the ratios, and so does c_bar = 1.
        ratios = np.exp(frag["target_logp"] - frag["behaviour_logp"])
        for bar in (rho_bar, pg_rho_bar, 1.0):
            if bar is not None:
                assert (ratios > bar).any() and (ratios < bar).any()


@pytest.mark.parametrize("lambda_", [1.0, 0.9])
@pytest.mark.parametrize("threshold", [1.0, 2.5, None])
def test_on_policy_vtrace_is_cairns_gae(lambda_, threshold):
    """Behaviour == target (rho = c = 1): ``v_s - V(x_s)`` is GAE(lambda)'s advantage, and with
    lambda = 1 the policy-gradient advantage is too (n-step returns bootstrapped at the ends)."""
    steps, n_envs, gamma = 16, 4, 0.97
    frag = _fragment(seed=5, steps=steps, n_envs=n_envs, dtype=np.float32)
    frag["target_logp"] = frag["behaviour_logp"]
    batch, inputs = _vtrace_inputs(frag)
    out = vtrace(**inputs, gamma=gamma, lambda_=lambda_, clip_rho_threshold=threshold,
                 clip_pg_rho_threshold=threshold)
    gae = compute_gae(batch["rewards"], batch["values"], inputs["next_values"].numpy(), batch["terminateds"],
                      batch["ends"], gamma=gamma, lambda_=lambda_)
    np.testing.assert_allclose(out.vs.numpy(), gae + batch["values"], rtol=1e-5, atol=1e-5)
    if lambda_ == 1.0:
        np.testing.assert_allclose(out.pg_advantages.numpy(), gae, rtol=1e-5, atol=1e-5)
    assert out.vs.dtype == torch.float32


def test_no_gradient_flows_through_the_targets():
    frag = _fragment(seed=0, steps=6, n_envs=4)
    _, inputs = _vtrace_inputs(frag)
    for k in ("target_logp", "values", "next_values", "rewards"):
        inputs[k] = inputs[k].clone().requires_grad_(True)
    out = vtrace(**inputs, gamma=0.9, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad


def test_an_empty_batch_gives_empty_targets():
    empty = torch.zeros(0)
    flags = torch.zeros(0, dtype=torch.bool)
    out = vtrace(behaviour_logp=empty, target_logp=empty, rewards=empty, values=empty, next_values=empty,
                 terminateds=flags, ends=flags, gamma=0.9, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    assert out.vs.shape == (0,) and out.pg_advantages.shape == (0,)


def _three_rows(**overrides: torch.Tensor) -> dict[str, torch.Tensor]:
    x = torch.zeros(3)
    rows = dict(behaviour_logp=x, target_logp=x, rewards=x, values=x, next_values=x,
                terminateds=torch.tensor([False, False, False]), ends=torch.tensor([False, False, True]))
    return {**rows, **overrides}


@pytest.mark.parametrize(("overrides", "message"), [
    ({"ends": torch.tensor([False, True, False])}, "last row is not marked in ends"),
    ({"terminateds": torch.tensor([True, False, False])}, r"rows \[0\] are terminated but not marked"),
    ({"values": torch.zeros(4)}, r"values has shape \(4,\), expected \(3,\)"),
    # ~ on integers is a bitwise not: 0/1 flags would silently read as -1/-2.
    ({"ends": torch.tensor([0, 0, 1])}, r"ends has dtype torch.int64, expected torch.bool"),
])
def test_a_batch_without_cairns_layout_is_refused(overrides, message):
    """Rows that do not end their last piece, or a termination inside a piece, would silently
    carry values across episodes or fragments: refused, with the fix."""
    with pytest.raises(ValueError, match=message):
        vtrace(**_three_rows(**overrides), gamma=0.9, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
