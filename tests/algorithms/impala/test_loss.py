"""IMPALA's and APPO's losses against the formulas written out by hand in numpy, and their
gradients: to the learnt policy's log-probabilities, values, entropies and KL only, never to
the V-trace targets and advantages, the behaviour policy or the target network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.algorithms.impala.loss import appo_loss, impala_loss, update_kl_coeff

N = 64


def _leaves(seed: int, *names: str) -> dict[str, torch.Tensor]:
    """Random float64 leaves that all ask for gradients (a loss must not give one to some)."""
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(N, generator=g, dtype=torch.float64).requires_grad_(True) for k in names}


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy()


def test_impala_loss_is_the_papers_by_hand():
    x = _leaves(0, "target_logp", "values", "entropy", "vs", "pg_advantages")
    vf, ent = 0.5, 0.01
    loss, stats = impala_loss(x["target_logp"], x["values"], x["entropy"], x["vs"], x["pg_advantages"],
                              vf_loss_coeff=vf, entropy_coeff=ent)
    logp, v, h, vs, adv = (_np(x[k]) for k in ("target_logp", "values", "entropy", "vs", "pg_advantages"))
    pi = -np.mean(logp * adv)
    vf_loss = np.mean(0.5 * (v - vs) ** 2)
    np.testing.assert_allclose(loss.item(), pi + vf * vf_loss - ent * np.mean(h), rtol=1e-12)
    np.testing.assert_allclose(
        [stats[k].item() for k in ("policy_loss", "vf_loss", "entropy", "total_loss")],
        [pi, vf_loss, np.mean(h), loss.item()], rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(_np(x["target_logp"].grad), -adv / N, rtol=1e-12)
    np.testing.assert_allclose(_np(x["values"].grad), vf * (v - vs) / N, rtol=1e-12)
    np.testing.assert_allclose(_np(x["entropy"].grad), np.full(N, -ent / N), rtol=1e-12)
    assert x["vs"].grad is None and x["pg_advantages"].grad is None


def _appo_by_hand(t, b, o, adv, *, clip_param, target_worker_clipping):
    """IMPACT's ratio and PPO's clipped surrogate, per row, and its derivative in ``t``."""
    is_ratio = np.clip(np.exp(b - o), 0.0, target_worker_clipping)
    r = is_ratio * np.exp(t - b)
    clipped = np.clip(r, 1.0 - clip_param, 1.0 + clip_param)
    surrogate = np.minimum(r * adv, clipped * adv)
    # d(r A)/dt = r A where the unclipped term is the minimum or the clip is inactive, else 0.
    active = (r * adv < clipped * adv) | ((r > 1.0 - clip_param) & (r < 1.0 + clip_param))
    return r, surrogate, np.where(active, r * adv, 0.0)


@pytest.mark.parametrize("use_kl", [True, False])
def test_appo_loss_is_the_clipped_surrogate_by_hand(use_kl):
    x = _leaves(1, "target_logp", "behaviour_logp", "old_target_logp", "values", "entropy", "vs",
                "pg_advantages", "kl")
    with torch.no_grad():  # ratios of about e^{+-1}: both clips bite on some rows and not on others
        x["behaviour_logp"] += 0.8 * x["old_target_logp"]
    clip_param, twc, vf, ent, klc = 0.4, 2.0, 0.5, 0.01, 0.7
    loss, stats = appo_loss(
        x["target_logp"], x["behaviour_logp"], x["old_target_logp"], x["values"], x["entropy"], x["vs"],
        x["pg_advantages"], x["kl"] if use_kl else None,
        clip_param=clip_param, vf_loss_coeff=vf, entropy_coeff=ent, kl_coeff=klc, target_worker_clipping=twc)
    t, b, o, v, h, vs, adv, kl = (_np(x[k]) for k in ("target_logp", "behaviour_logp", "old_target_logp",
                                                      "values", "entropy", "vs", "pg_advantages", "kl"))
    r, surrogate, d_surrogate = _appo_by_hand(t, b, o, adv, clip_param=clip_param, target_worker_clipping=twc)
    assert (np.exp(b - o) > twc).any() and (np.exp(b - o) < twc).any()
    assert (np.abs(r - 1.0) > clip_param).any() and (np.abs(r - 1.0) < clip_param).any()
    expected = -np.mean(surrogate) + vf * np.mean(0.5 * (v - vs) ** 2) - ent * np.mean(h)
    if use_kl:
        expected += klc * np.mean(kl)
        np.testing.assert_allclose(stats["mean_kl_loss"].item(), np.mean(kl), rtol=1e-12)
    else:
        assert "mean_kl_loss" not in stats
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-12)
    np.testing.assert_allclose(stats["policy_loss"].item(), -np.mean(surrogate), rtol=1e-12)
    np.testing.assert_allclose(stats["clip_fraction"].item(), np.mean(np.abs(r - 1.0) > clip_param))
    loss.backward()
    np.testing.assert_allclose(_np(x["target_logp"].grad), -d_surrogate / N, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(_np(x["values"].grad), vf * (v - vs) / N, rtol=1e-12)
    np.testing.assert_allclose(_np(x["entropy"].grad), np.full(N, -ent / N), rtol=1e-12)
    if use_kl:
        np.testing.assert_allclose(_np(x["kl"].grad), np.full(N, klc / N), rtol=1e-12)
    for constant in ("behaviour_logp", "old_target_logp", "vs", "pg_advantages"):
        assert x[constant].grad is None, constant


@pytest.mark.parametrize(("kl", "expected"), [(0.03, 1.5), (0.02, 1.0), (0.005, 1.0), (0.004, 0.5)])
def test_the_kl_coefficient_adapts_to_the_target(kl, expected):
    assert update_kl_coeff(1.0, kl, kl_target=0.01) == expected
