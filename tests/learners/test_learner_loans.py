"""The driver owns each policy's training state and lends it to its learner for one iteration
(cairn.learners.group): a policy's first update of an iteration sends its whole state, the
weights come back after every update, the rest when train() ends. Run through the
device-learner path with device="cpu" (what a GPU learner in the driver's process does), it
must equal learning on the driver's own policies bit for bit, for PPO (an LSTM policy's
sequence learner too), DQN (whose target syncs end the loan mid-iteration) and SAC (a learn
call per gradient step), also after the driver's state was changed between iterations in any
way, including ways no version counter sees."""

from contextlib import contextmanager

import numpy as np
import pytest
import torch

import cairn
from cairn.learners.actor import LearnerActor
from tests.helpers import assert_trees_equal


def ppo() -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=50, num_epochs=2, model={"hidden": [16, 16]})
            .debugging(seed=3))


def dqn() -> cairn.AlgorithmConfig:
    return (cairn.DQNConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                      target_network_update_freq=24, update_backend="torch", model={"hidden": [16]})
            .env_runners(rollout_fragment_length=8).debugging(seed=1))


def lstm_ppo() -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=50, num_epochs=2,
                      model={"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 10})
            .debugging(seed=4))


def sac() -> cairn.AlgorithmConfig:
    return (cairn.SACConfig().environment("Pendulum-v1")
            .training(train_batch_size=48, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                      model={"hidden": [16, 16]})
            .debugging(seed=2))


class CountingLearner(LearnerActor):
    """A device learner on the CPU that counts the driver states it is sent."""

    states_received = 0
    updates = 0

    def update(self, fn, policy_id, state, inputs):
        self.updates += 1
        self.states_received += state is not None
        return super().update(fn, policy_id, state, inputs)


def with_cpu_learner(algo: cairn.Algorithm, learner_class: type[LearnerActor] = LearnerActor) -> LearnerActor:
    learner = algo.learner_group.device_learner = learner_class(algo.config, device="cpu")
    return learner


@contextmanager
def in_place_and_lent(make_config, learner_class: type[LearnerActor] = LearnerActor):
    """``(direct, lent, learner)``: two algorithms of ``make_config()``, one learning on its own
    policies, one lending them to ``learner`` (a device learner on the CPU); both stopped after."""
    direct, lent = make_config().build(), make_config().build()
    try:
        yield direct, lent, with_cpu_learner(lent, learner_class)
    finally:
        direct.stop()
        lent.stop()


def change_alike_and_learn_on(make_config, tmp_path, change) -> None:
    """An iteration on each of :func:`in_place_and_lent`'s pair and a checkpoint of the direct
    one, then the same ``change(algo, checkpoint)`` on both: they hold the same state, and the
    next iteration learns from it alike in both, bit for bit."""
    with in_place_and_lent(make_config) as (direct, lent, _):
        direct.train()
        lent.train()
        checkpoint = direct.save(tmp_path / "ckpt")
        for algo in (direct, lent):
            change(algo, checkpoint)
        assert_trees_equal(lent.get_state(), direct.get_state())
        direct.train()
        lent.train()
        assert_trees_equal(lent.get_state(), direct.get_state())


@pytest.mark.parametrize("make_config", [ppo, lstm_ppo, dqn, sac], ids=["ppo", "lstm-ppo", "dqn", "sac"])
def test_a_lent_state_equals_learning_in_place_and_goes_out_once_per_loan(make_config) -> None:
    with in_place_and_lent(make_config, CountingLearner) as (direct, lent, learner):
        for _ in range(2):
            sent = learner.states_received
            direct.train()
            lent.train()
            assert learner.states_received > sent  # every iteration starts with the driver's state
            assert not lent.learner_group.lent  # and ends with all of it back on the driver
        assert_trees_equal(lent.get_state(), direct.get_state())
        if make_config in (dqn, sac):  # many updates per loan (DQN: a target sync starts a new one)
            target_syncs = int(lent.get_policy().last_target_update // 24) if make_config is dqn else 0
            assert learner.states_received <= 2 + target_syncs < learner.updates


def _set_weights(algo: cairn.Algorithm, _: str) -> None:
    policy = algo.get_policy()
    policy.set_weights({k: np.full_like(v, 0.01) for k, v in policy.get_weights().items()})


def _weights_through_data(algo: cairn.Algorithm, _: str) -> None:
    # ``.data`` is a detached alias: torch's version counter of the parameter does not move.
    with torch.no_grad():
        for param in algo.get_policy().model.parameters():
            param.data.mul_(0.5)


def _optimizer_moments_through_data(algo: cairn.Algorithm, _: str) -> None:
    for slots in algo.get_policy().optimizer.state.values():
        for value in slots.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                value.data.zero_()


def _learning_rate(algo: cairn.Algorithm, _: str) -> None:
    algo.get_policy().set_learning_rate(3e-3)


def _learning_rate_in_param_groups(algo: cairn.Algorithm, _: str) -> None:
    # torch's own way (a user's schedule in on_train_result): the policy's config does not see it.
    for group in algo.get_policy().optimizer.param_groups:
        group["lr"] *= 3.0


def _restore(algo: cairn.Algorithm, checkpoint: str) -> None:
    algo.restore(checkpoint)


def _restore_policy_component(algo: cairn.Algorithm, checkpoint: str) -> None:
    algo.restore_from_path(checkpoint, component="policies/default_policy")


def _policy_state(algo: cairn.Algorithm, checkpoint: str) -> None:
    restored = cairn.Policy.from_checkpoint(f"{checkpoint}/policies/default_policy")
    algo.get_policy().set_state(restored.get_state())


MUTATIONS = [_set_weights, _weights_through_data, _optimizer_moments_through_data, _learning_rate,
             _learning_rate_in_param_groups,
             _restore, _restore_policy_component, _policy_state]


@pytest.mark.filterwarnings("ignore::cairn.errors.ReplayBufferNotRestoredWarning")  # SAC's, in both runs
@pytest.mark.parametrize("make_config", [ppo, sac], ids=["ppo", "sac"])
@pytest.mark.parametrize("mutate", MUTATIONS, ids=[m.__name__.strip("_") for m in MUTATIONS])
def test_a_driver_change_between_iterations_reaches_the_next_update(make_config, mutate, tmp_path) -> None:
    # The same change on a policy learning in place and on one lent to a learner: the next
    # iteration must learn from the changed state in both, bit for bit.
    def train_then_mutate(algo: cairn.Algorithm, checkpoint: str) -> None:
        algo.train()
        mutate(algo, checkpoint)

    change_alike_and_learn_on(make_config, tmp_path, train_then_mutate)


def test_a_save_right_after_train_holds_the_learners_optimizer_state(tmp_path) -> None:
    with in_place_and_lent(ppo) as (direct, lent, _):
        direct.train()
        lent.train()
        restored = cairn.Algorithm.from_checkpoint(lent.save(tmp_path / "ckpt"))
        try:
            want = direct.get_policy().get_state()
            assert want["optimizer"]["state"]  # Adam's moments exist: there is something to lose
            assert_trees_equal(restored.get_policy().get_state(), want)
        finally:
            restored.stop()


def test_a_save_inside_an_iteration_takes_what_the_learners_learned(tmp_path) -> None:
    # training_step() without train()'s closing sync (a callback or an interrupted iteration):
    # a save still holds the learners' optimizer state, through the one save path.
    from cairn.algorithms.save_restore import save_algorithm

    with in_place_and_lent(sac) as (direct, lent, _):
        for algo in (direct, lent):
            algo.train()
            algo.training_step()
        path = save_algorithm(lent, tmp_path / "ckpt")
        with pytest.warns(cairn.errors.ReplayBufferNotRestoredWarning):
            restored = cairn.Algorithm.from_checkpoint(path)
        try:
            want = direct.get_policy().get_state()
            assert_trees_equal(restored.get_policy().get_state()["optimizer"], want["optimizer"])
        finally:
            restored.stop()


class FailingSampleEnd(cairn.Callbacks):
    """Raises at the 60th sample's end: inside SAC's second iteration, after gradient steps."""

    def __init__(self) -> None:
        self.samples = 0

    def on_sample_end(self, *, samples, env_runner) -> None:
        self.samples += 1
        if self.samples == 60:
            raise RuntimeError("a callback failed mid-iteration")


def test_an_iteration_that_fails_after_learning_gives_the_learned_state_back() -> None:
    # train() raises after some of SAC's gradient steps, yet the policy holds the optimizer
    # state of the updates that ran, consistent with its weights, as learning in place does.
    def failing_sac() -> cairn.AlgorithmConfig:
        return sac().callbacks(FailingSampleEnd)

    with in_place_and_lent(failing_sac, CountingLearner) as (direct, lent, learner):
        for algo in (direct, lent):
            algo.train()
        first = learner.updates
        for algo in (direct, lent):
            with pytest.raises(RuntimeError, match="failed mid-iteration"):
                algo.train()
        assert learner.updates > first  # the failed iteration learned before it failed
        assert not lent.learner_group.lent
        assert_trees_equal(lent.get_policy().get_state(), direct.get_policy().get_state())


class FailingFourthUpdate(LearnerActor):
    """A device learner on the CPU whose fourth update raises (PPO with two policies: the
    second policy's update in the second iteration)."""

    updates = 0

    def update(self, fn, policy_id, state, inputs):
        self.updates += 1
        if self.updates == 4:
            raise RuntimeError("the learn function failed")
        return super().update(fn, policy_id, state, inputs)


def test_a_failed_update_leaves_the_other_policies_loans_to_be_given_back() -> None:
    # Two policies lent to one device learner; the second's update raises. The first policy's
    # update of that iteration completed: train()'s closing sync still brings back all of it.
    from cairn.learners.policy_sync import learned_parts
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).build()
    try:
        learner = with_cpu_learner(algo, FailingFourthUpdate)
        algo.train()
        first = next(iter(learner.policies))  # the policy learned first in each iteration
        updates_before = algo.get_policy(first).num_grad_updates
        with pytest.raises(RuntimeError, match="learn function failed"):
            algo.train()
        assert not algo.learner_group.lent
        got, want = algo.get_policy(first).get_state(), learner.policies[first][0].get_state()
        assert want["counters"]["num_grad_updates"] > updates_before
        assert_trees_equal(learned_parts(got), learned_parts(want))
        assert_trees_equal(got["weights"], want["weights"])
    finally:
        algo.stop()


@pytest.mark.parametrize("phase", ["between_updates", "actor_phase"])
def test_a_learn_call_that_raises_leaves_the_policy_as_learning_in_place_does(monkeypatch, phase) -> None:
    # SAC's 30th learn call raises (before it starts, or in its actor phase once the critics
    # stepped) inside the loan of the second iteration. Learning in place keeps the 29 updates
    # (and the critics' step) in the weights, optimizer state, generator and num_grad_updates;
    # the device learner's policy must hold the same, not the weights of the last completed
    # update beside the optimizer state and generator of the loan's start.
    import cairn.algorithms.sac.learn as sac_learn_module
    import cairn.algorithms.sac.sac as sac_module

    calls = {"learn": 0, "actor": 0}
    learn, actor_loss = sac_learn_module.sac_learn, sac_learn_module.actor_loss

    def counted(name, fn, fails):  # fn, counting its calls in calls[name]; with fails, the 30th raises
        def wrapper(*args, **kwargs):
            calls[name] += 1
            if fails and calls[name] == 30:
                raise RuntimeError("the model failed")
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(sac_module, "sac_learn", counted("learn", learn, phase == "between_updates"))
    monkeypatch.setattr(sac_learn_module, "actor_loss", counted("actor", actor_loss, phase == "actor_phase"))
    states = []
    for lend in (False, True):
        calls.update(learn=0, actor=0)
        algo = sac().build()
        try:
            if lend:
                with_cpu_learner(algo)
            algo.train()  # 16 updates
            with pytest.raises(RuntimeError, match="the model failed"):
                algo.train()
            assert calls["learn"] == 30 and not algo.learner_group.lent
            states.append(algo.get_policy().get_state())
            assert algo.get_policy().num_grad_updates == (29 if phase == "between_updates" else 30)
            algo.train()  # and the next iteration learns on from there alike
            states.append(algo.get_policy().get_state())
        finally:
            algo.stop()
    assert_trees_equal(states[2], states[0])
    assert_trees_equal(states[3], states[1])


@pytest.mark.filterwarnings("ignore::cairn.errors.ReplayBufferNotRestoredWarning")  # SAC's, in both runs
@pytest.mark.parametrize("make_config", [ppo, sac], ids=["ppo", "sac"])
@pytest.mark.parametrize("restore", [_restore, _restore_policy_component],
                         ids=["restore", "restore_policy_component"])
def test_a_restore_while_loans_are_open_reaches_the_next_update(make_config, restore, tmp_path) -> None:
    # A direct training_step() call leaves its loans open; a restore in place afterwards must
    # hold (a save right after it would otherwise store the learners' optimizer state) and
    # reach the learners, not be overwritten by their copies at the next update.
    def step_then_restore(algo: cairn.Algorithm, checkpoint: str) -> None:
        algo.training_step()
        restore(algo, checkpoint)

    change_alike_and_learn_on(make_config, tmp_path, step_then_restore)


@pytest.mark.parametrize("make_config", [ppo, sac], ids=["ppo", "sac"])
def test_a_policy_checkpoint_exported_inside_an_iteration_holds_the_learners_state(make_config,
                                                                                   tmp_path) -> None:
    # export_policy_checkpoint writes the policy's whole state: after a direct training_step()
    # (loans open) it must hold the learners' optimizer state and generator beside their
    # weights, as learning in place gives, not the optimizer state of the loan's start.
    exported = []
    for lend in (False, True):
        algo = make_config().build()
        try:
            if lend:
                with_cpu_learner(algo)
            algo.train()
            algo.training_step()
            algo.export_policy_checkpoint(tmp_path / f"policy_{lend}")
            exported.append(cairn.Policy.from_checkpoint(tmp_path / f"policy_{lend}").get_state())
        finally:
            algo.stop()
    assert exported[0]["optimizer"]["state"]  # Adam's moments exist: there is something to lose
    assert_trees_equal(exported[1], exported[0])


class SGDPolicy(cairn.Policy):
    """A policy whose class builds another optimizer: what the refusal below recommends."""

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=float(self.config["lr"]), momentum=0.9)


def test_an_optimizer_assigned_to_a_lent_policy_is_refused_and_a_subclass_learns_as_in_place() -> None:
    # A learner builds its copy from the policy's class and state, which does not name the
    # optimizer: an SGD assigned to policy.optimizer would have been stepped as the class's Adam
    # (taking the SGD's lr), silently unlike learning in place. It is refused before anything
    # is lent; a class whose make_optimizer() builds it learns as in place, bit for bit.
    from cairn.errors import ConfigError

    algo = ppo().build()
    try:
        with_cpu_learner(algo)
        algo.train()
        policy = algo.get_policy()
        weights = policy.get_weights()
        policy.optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.1)
        refused = r"'default_policy' has a torch\.optim\.sgd\.SGD .* builds a torch\.optim\.adam\.Adam"
        with pytest.raises(ConfigError, match=refused):
            algo.train()
        assert not algo.learner_group.lent
        assert_trees_equal(policy.get_weights(), weights)
        policy.optimizer = policy.make_optimizer()  # what the class builds: lent again
        algo.train()
    finally:
        algo.stop()

    def sgd_ppo() -> cairn.AlgorithmConfig:
        return ppo().multi_agent(policies={"default_policy": cairn.PolicySpec(SGDPolicy)})

    with in_place_and_lent(sgd_ppo) as (direct, lent, _):
        for _ in range(2):
            direct.train()
            lent.train()
        assert isinstance(lent.get_policy().optimizer, torch.optim.SGD)
        assert_trees_equal(lent.get_state(), direct.get_state())


class FailingFourthUpdateAndReadBack(FailingFourthUpdate):
    """As FailingFourthUpdate, and the failed policy's copy cannot be read back afterwards."""

    failed: str | None = None

    def update(self, fn, policy_id, state, inputs):
        if self.updates == 3:
            self.failed = policy_id
        return super().update(fn, policy_id, state, inputs)

    def learned(self, policy_id):
        if policy_id == self.failed:
            raise RuntimeError("the copy cannot be read")
        return super().learned(policy_id)


def test_a_failed_update_whose_copy_cannot_be_read_back_warns_and_the_next_iteration_learns() -> None:
    # The learn function's error is the one raised; the failed policy keeps the driver's
    # weights and learned parts of the loan's start (its loan ends: the next update sends it
    # whole); the other policy's loan comes back.
    from cairn.learners.policy_sync import learned_parts
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).build()
    try:
        learner = with_cpu_learner(algo, FailingFourthUpdateAndReadBack)
        algo.train()
        before = {pid: algo.get_policy(pid).get_state() for pid in algo.policies}
        with pytest.raises(RuntimeError, match="learn function failed"), \
                pytest.warns(RuntimeWarning, match="could not be read back"):
            algo.train()
        assert learner.failed is not None and not algo.learner_group.lent
        got, want = algo.get_policy(learner.failed).get_state(), before[learner.failed]
        assert_trees_equal(learned_parts(got), learned_parts(want))
        assert_trees_equal(got["weights"], want["weights"])
        (other,) = set(algo.policies) - {learner.failed}
        assert algo.get_policy(other).num_grad_updates > before[other]["counters"]["num_grad_updates"]
        learner.failed = None
        algo.train()
        assert not algo.learner_group.lent
    finally:
        algo.stop()
