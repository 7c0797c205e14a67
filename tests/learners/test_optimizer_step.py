"""GradientSync.optimizer_step, the one "clear, backward, all-reduce, clip, step" of every
optimizer group in SAC's, TD3's and DQN's learn functions: checked against the same sequence
written out with torch's own clip_grad_norm_, and for what must not happen (another group's
stale gradients stepped, an empty shard stepping anything)."""

from __future__ import annotations

import pytest
import torch

from cairn.errors import NonFiniteLossError
from cairn.learners import LOCAL_SYNC, GradientSync
from cairn.policy.torch_utils import clip_grad_norm


def two_groups() -> tuple[torch.nn.Linear, torch.nn.Linear, torch.optim.Adam]:
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam([{"params": list(a.parameters()), "name": "a"},
                                  {"params": list(b.parameters()), "name": "b"}], lr=0.1)
    return a, b, optimizer


def loss_of(a: torch.nn.Linear, b: torch.nn.Linear) -> torch.Tensor:
    return b(torch.tanh(a(torch.ones(4, 3) * 5.0))).square().mean()


class RecordingSync(GradientSync):
    def __init__(self) -> None:
        self.reduced: list[list[torch.nn.Parameter]] = []

    def all_reduce_grads(self, params):
        self.reduced.append(list(params))


def test_equals_the_sequence_written_out():
    a, b, optimizer = two_groups()
    ref_a, ref_b, ref_optimizer = two_groups()
    sync = RecordingSync()
    sync.optimizer_step(optimizer, loss_of(a, b), list(a.parameters()), grad_clip=0.01,
                        also_reduce=list(b.parameters()))

    ref_optimizer.zero_grad(set_to_none=True)
    loss_of(ref_a, ref_b).backward()
    assert float(clip_grad_norm(list(ref_a.parameters()), 0.01)) > 0.01  # the clip bites
    ref_optimizer.step()

    assert [id(p) for p in sync.reduced[0]] == [id(p) for p in [*a.parameters(), *b.parameters()]]
    moved, reference = [*a.parameters(), *b.parameters()], [*ref_a.parameters(), *ref_b.parameters()]
    initial = [p for net in two_groups()[:2] for p in net.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(moved, reference, strict=True))
    assert not any(torch.equal(p, q) for p, q in zip(moved, initial, strict=True))


def test_another_groups_stale_gradients_are_not_stepped():
    a, b, optimizer = two_groups()
    for p in b.parameters():
        p.grad = torch.ones_like(p)  # left by an earlier phase's backward
    b_before = [p.detach().clone() for p in b.parameters()]
    a_before = [p.detach().clone() for p in a.parameters()]
    LOCAL_SYNC.optimizer_step(optimizer, a(torch.ones(4, 3)).square().mean(), list(a.parameters()),
                              grad_clip=None)
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), b_before, strict=True))
    assert not any(torch.equal(p, q) for p, q in zip(a.parameters(), a_before, strict=True))


def test_without_a_loss_nothing_moves_but_the_all_reduce_still_runs():
    a, b, optimizer = two_groups()
    for p in [*a.parameters(), *b.parameters()]:
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in [*a.parameters(), *b.parameters()]]
    sync = RecordingSync()
    sync.optimizer_step(optimizer, None, list(a.parameters()), grad_clip=None)
    assert len(sync.reduced) == 1  # an empty shard still joins the other learners' sum
    assert all(torch.equal(p, q) for p, q in zip([*a.parameters(), *b.parameters()], before, strict=True))
    assert all(p.grad is None for p in [*a.parameters(), *b.parameters()])


def _state(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in net.parameters()]
    for state in optimizer.state.values():
        tensors += [v.detach().clone() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_a_non_finite_loss_raises_before_the_step_and_the_next_step_works(bad, grad_clip):
    # The silent failure this guards: a NaN loss backpropagates NaN gradients, Adam steps, and
    # every weight is NaN with no error until the policy next acts.
    a, b, optimizer = two_groups()
    params = list(a.parameters())
    LOCAL_SYNC.optimizer_step(optimizer, loss_of(a, b), params, grad_clip=grad_clip)  # Adam has state
    before = _state(a, optimizer)
    poisoned = loss_of(a, b) * torch.tensor(bad)
    with pytest.raises(NonFiniteLossError, match="loss") as caught:
        LOCAL_SYNC.optimizer_step(optimizer, poisoned, params, grad_clip=grad_clip)
    assert caught.value.stat == "loss" and str(caught.value.value) == str(bad)
    assert "grad_clip" in str(caught.value) and "observation_filter" in str(caught.value)
    assert _same(_state(a, optimizer), before), "the weights or Adam's state moved"
    assert all(p.grad is None for p in [*a.parameters(), *b.parameters()])
    LOCAL_SYNC.optimizer_step(optimizer, loss_of(a, b), params, grad_clip=grad_clip)
    after = _state(a, optimizer)
    assert not _same(after, before) and all(torch.isfinite(t).all() for t in after)


def test_a_finite_loss_with_non_finite_gradients_raises_when_clipping_reads_their_norm():
    a, _b, optimizer = two_groups()
    params = list(a.parameters())
    before = _state(a, optimizer)
    out = a(torch.ones(4, 3))
    loss = torch.sqrt((out - out.detach()).abs()).sum()  # 0, but d sqrt(|u|)/du at 0 is NaN
    assert torch.isfinite(loss)
    with pytest.raises(NonFiniteLossError, match="gradient norm") as caught:
        LOCAL_SYNC.optimizer_step(optimizer, loss, params, grad_clip=1.0)
    assert caught.value.stat == "gradient norm"
    assert _same(_state(a, optimizer), before)
    assert all(p.grad is None for p in params)


def test_the_error_names_the_policy_once_a_learner_fills_it_in():
    error = NonFiniteLossError("loss", float("nan"))
    assert "a policy" in str(error)
    assert "policy 'hero'" in str(error.with_policy_id("hero")) and error.policy_id == "hero"


@pytest.mark.parametrize("grad_clip", [None, 1.0])
def test_a_finite_loss_with_nan_gradients_raises_before_the_step_and_the_next_step_works(grad_clip):
    # Without grad_clip nothing read the gradients: Adam stepped on NaN and every weight of
    # ``a`` became NaN, with no error.
    a, _b, optimizer = two_groups()
    params = list(a.parameters())
    LOCAL_SYNC.optimizer_step(optimizer, a(torch.ones(4, 3)).square().mean(), params, grad_clip=grad_clip)
    before = _state(a, optimizer)
    out = a(torch.ones(4, 3))
    loss = torch.sqrt((out - out.detach()).abs()).sum()  # 0, but d sqrt(|u|)/du at 0 is NaN
    assert torch.isfinite(loss)
    with pytest.raises(NonFiniteLossError, match="gradient norm") as caught:
        LOCAL_SYNC.optimizer_step(optimizer, loss, params, grad_clip=grad_clip)
    assert caught.value.stat == "gradient norm" and caught.value.parameters
    assert "lower the learning rate" in str(caught.value) and "grad_clip" in str(caught.value)
    assert _same(_state(a, optimizer), before), "the weights or Adam's state moved"
    assert all(p.grad is None for p in params)
    LOCAL_SYNC.optimizer_step(optimizer, a(torch.ones(4, 3)).square().mean(), params, grad_clip=grad_clip)
    after = _state(a, optimizer)
    assert not _same(after, before) and all(torch.isfinite(t).all() for t in after)


def test_a_gradient_that_overflows_from_a_finite_loss_raises_naming_the_parameter():
    # A huge but finite observation entry (3e38, a float32 "no value" sentinel) read by a zero
    # weight: the output and loss are finite, the weight's gradient (a sum of 32 products of it)
    # is infinite. Adam would make that weight NaN.
    net = torch.nn.Linear(3, 1)
    with torch.no_grad():
        net.weight[0, 0] = 0.0
    optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
    before = _state(net, optimizer)
    loss = (net(torch.tensor([[3e38, 1.0, 1.0]] * 32)) - 10.0).square().mean()
    assert torch.isfinite(loss)
    with pytest.raises(NonFiniteLossError, match="gradient norm") as caught:
        LOCAL_SYNC.optimizer_step(optimizer, loss, list(net.parameters()), grad_clip=None)
    assert caught.value.value == float("inf")
    named = caught.value.with_policy_id("hero", net.named_parameters())
    assert named.parameters == ("weight",) and "gradients of weight" in str(named)
    assert "policy 'hero'" in str(named)
    assert _same(_state(net, optimizer), before)


def test_a_non_finite_gradient_of_also_reduce_raises_with_clipping_set():
    # SAC's temperature steps with the critics (also_reduce) but is not clipped with them: its
    # gradient is checked too.
    a, _b, optimizer = two_groups()
    log_alpha = torch.nn.Parameter(torch.zeros(()))
    optimizer.add_param_group({"params": [log_alpha], "name": "alpha"})
    before = [*_state(a, optimizer), log_alpha.detach().clone()]
    loss = a(torch.ones(4, 3)).square().mean() + torch.sqrt((log_alpha - log_alpha.detach()).abs())
    with pytest.raises(NonFiniteLossError, match="gradient norm") as caught:
        LOCAL_SYNC.optimizer_step(optimizer, loss, list(a.parameters()), grad_clip=1.0,
                                  also_reduce=[log_alpha])
    assert len(caught.value.parameters) == 1
    assert _same([*_state(a, optimizer), log_alpha.detach().clone()], before)


def test_the_error_crosses_processes_with_names_and_no_tensor():
    import pickle  # the transport Ray uses for a learner actor's error; no load path of cairn

    error = NonFiniteLossError("gradient norm", float("nan"), parameters=[torch.zeros(2)])
    error.with_policy_id("hero", [("pi.weight", torch.zeros(1))])
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.stat, copy.policy_id) == ("gradient norm", "hero")
    assert copy.parameters == ("parameter #0 of shape (2,)",)
    assert str(copy) == str(error)
