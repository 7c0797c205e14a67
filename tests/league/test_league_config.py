"""config.league(...): defaults, storage in to_dict/from_dict, and clear ConfigErrors."""

import ast

import pytest

import cairn
from cairn.config.league_settings import LEAGUE_DEFAULTS
from cairn.errors import ConfigError
from tests.league.games import make_connect_four


def _config() -> cairn.AlgorithmConfig:
    return cairn.PPOConfig().environment(make_connect_four)


def test_defaults_and_round_trip():
    config = _config().league(max_snapshots=4, matchmaking="uniform", opponents={"rnd": "random_legal"})
    settings = config.league_config
    assert set(settings) == set(LEAGUE_DEFAULTS)
    assert settings["snapshot_every_iterations"] == 10  # neither rule given: every 10 iterations
    assert settings["matchmaking"] == "uniform" and settings["max_snapshots"] == 4
    assert settings["opponents"] == {"rnd": "random_legal"} and settings["self_play_fraction"] == 0.2
    assert list(config.policies) == ["main"]  # the one default policy becomes main
    data = config.to_dict()
    assert data["league_config"] == settings and data["policy_mapping_fn"] is None
    back = cairn.AlgorithmConfig.from_dict(data)
    assert back.league_config == settings and list(back.policies) == ["main"]
    back.validate()
    assert cairn.PPOConfig().to_dict()["league_config"] is None


def test_win_rate_rule_alone_takes_no_iteration_rule():
    settings = _config().league(snapshot_win_rate=0.6).league_config
    assert settings["snapshot_every_iterations"] is None and settings["snapshot_win_rate"] == 0.6


@pytest.mark.parametrize("kwargs, words", [
    ({"matchmaking": "elo"}, ["matchmaking", "'elo'", "pfsp"]),
    ({"self_play_fraction": 1.5}, ["self_play_fraction", "1.5", "[0, 1]"]),
    ({"snapshot_every_iterations": 0}, ["snapshot_every_iterations", "0"]),
    ({"snapshot_win_rate": 0.0}, ["snapshot_win_rate", "(0, 1]"]),
    ({"max_snapshots": -1}, ["max_snapshots", "-1"]),
    ({"main": "../evil"}, ["main", "../evil"]),
    ({"opponents": {"rnd": 3}}, ["opponents", "strings"]),
    ({"opponents": ["random_legal"]}, ["opponents", "['random_legal']", "{name:"]),  # a list, not a dict
    ({"opponents": "random_legal"}, ["opponents", "'random_legal'", "{name:"]),
    ({"opponents": {"main": "random_legal"}}, ["opponents", "other than main"]),
    ({"evaluation_games": 0}, ["evaluation_games", "0"]),
])
def test_invalid_settings_are_config_errors(kwargs, words):
    with pytest.raises(ConfigError) as err:
        _config().league(**kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_league_with_a_user_mapping_names_both():
    def pick(agent_id, **kwargs):
        return "main"

    config = _config().league().multi_agent(policy_mapping_fn=pick)
    with pytest.raises(ConfigError, match=r"config.league\(\.\.\.\) and policy_mapping_fn='.*pick'"):
        config.validate()


def test_main_must_be_a_policy():
    config = _config().multi_agent(policies={"a", "b"}).league(main="hero")
    with pytest.raises(ConfigError, match=r"league\(main='hero'\) names no configured policy"):
        config.validate()


def test_stored_league_dict_is_checked_on_load():
    data = _config().league().to_dict()
    data["league_config"] = {**data["league_config"], "matchmaking": "elo"}
    with pytest.raises(ConfigError, match="matchmaking"):
        cairn.AlgorithmConfig.from_dict(data)
    data["league_config"] = {"main": "main"}
    with pytest.raises(ConfigError, match="league_config"):
        cairn.AlgorithmConfig.from_dict(data)


def test_a_partial_league_dict_is_refused_with_the_missing_keys_and_the_whole_dict_to_give():
    data = _config().league().to_dict()
    data["league_config"] = {"opponents": {"random_legal": "random_legal"}, "max_snapshots": 3}
    with pytest.raises(ConfigError) as info:
        cairn.AlgorithmConfig.from_dict(data)
    message = str(info.value)
    assert "missing ['evaluation_games', 'main', 'matchmaking', 'self_play_fraction'" in message
    assert "only config.league(...) fills in the defaults" in message
    whole = ast.literal_eval(message.split("settings left out, ", 1)[1].split("; overriding", 1)[0])
    assert whole == cairn.PPOConfig().league(opponents={"random_legal": "random_legal"},
                                             max_snapshots=3).league_config
    data["league_config"] = whole  # the dict the message gives is accepted
    assert cairn.AlgorithmConfig.from_dict(data).league_config == whole
    data["league_config"] = {"main": "main", "bogus": 1}
    with pytest.raises(ConfigError, match=r"unknown \['bogus'\]\).*give every key of \['evaluation_games'"):
        cairn.AlgorithmConfig.from_dict(data)


def test_a_partial_league_dict_with_a_wrong_value_names_that_value():
    # A misspelt matchmaking in a partial dict was answered only with "give every key": a user who
    # did so was then refused again for the value the first message had not named.
    data = _config().league().to_dict()
    data["league_config"] = {"matchmaking": "pfps"}
    with pytest.raises(ConfigError) as info:
        cairn.AlgorithmConfig.from_dict(data)
    message = str(info.value)
    assert "missing ['evaluation_games', 'main'" in message
    assert "matchmaking='pfps' is invalid: expected one of ['pfsp', 'uniform', 'latest']" in message
    assert "give every key of ['evaluation_games'" in message


def test_the_command_lines_partial_league_config_gets_the_same_message(capsys, tmp_path):
    from cairn.cli import main

    argv = ["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3", "--league",
            "--config", 'league_config={"opponents": {}}', "--stop-iters", "1",
            "--out", str(tmp_path / "run")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "(missing ['evaluation_games', 'main'" in err and "Fix: give the whole dict" in err, err


def test_a_later_league_call_keeps_what_earlier_ones_set():
    # As every other section (training(lr=...).training(gamma=...) keeps lr); before, a second
    # call started again from the defaults and silently dropped max_snapshots and the opponents.
    config = _config().league(max_snapshots=3, opponents={"rnd": "random_legal"})
    config.league(matchmaking="uniform")
    settings = config.league_config
    assert settings["max_snapshots"] == 3 and settings["opponents"] == {"rnd": "random_legal"}
    assert settings["matchmaking"] == "uniform" and settings["snapshot_every_iterations"] == 10
    # The default snapshot rule holds while no call named one: a later win-rate rule replaces it.
    later = _config().league(max_snapshots=3).league(snapshot_win_rate=0.6).league_config
    assert later["snapshot_every_iterations"] is None and later["snapshot_win_rate"] == 0.6
    both = _config().league(snapshot_every_iterations=10).league(snapshot_win_rate=0.6).league_config
    assert both["snapshot_every_iterations"] == 10 and both["snapshot_win_rate"] == 0.6
    # Settings stored otherwise (from_dict, a direct assignment) count as set (all but the
    # default snapshot rule: the tests below).
    stored = cairn.AlgorithmConfig.from_dict(_config().league(max_snapshots=2).to_dict())
    assert stored.league(matchmaking="latest").league_config["max_snapshots"] == 2
    replaced = _config().league(max_snapshots=3)
    replaced.league_config = None
    assert replaced.league(matchmaking="latest").league_config["max_snapshots"] is None
    with pytest.raises(ConfigError, match="max_snapshots=0"):  # a bad later call changes nothing
        config.league(max_snapshots=0)
    assert config.league_config == settings


#: First calls on the original config, and later calls on it and on its round-tripped copy.
_FIRST = [{}, {"max_snapshots": 3}, {"snapshot_win_rate": 0.5}, {"snapshot_every_iterations": 5},
          {"snapshot_every_iterations": 10, "snapshot_win_rate": 0.5},
          {"snapshot_every_iterations": 5, "snapshot_win_rate": 0.5}, {"snapshot_win_rate": None},
          {"snapshot_every_iterations": None},
          {"matchmaking": "latest", "opponents": {"rnd": "random_legal"}}]
_LATER = [{"snapshot_win_rate": 0.6}, {"snapshot_every_iterations": 4}, {"snapshot_win_rate": None},
          {"snapshot_every_iterations": None}, {"snapshot_every_iterations": None, "snapshot_win_rate": 0.7},
          {"matchmaking": "uniform"}, {"snapshot_every_iterations": 10, "snapshot_win_rate": 0.6}, {}]


def _outcome(config: cairn.AlgorithmConfig, calls: list[dict]) -> object:
    """league_config after ``calls``, or the ConfigError's message."""
    try:
        for call in calls:
            config.league(**call)
    except ConfigError as exc:
        return str(exc)
    return config.league_config


@pytest.mark.parametrize("first", _FIRST)
def test_a_config_read_back_from_its_dict_takes_every_later_league_call_as_the_original(first):
    # from_dict counted every stored setting as named: .league(snapshot_win_rate=0.6) on it kept
    # the default snapshot_every_iterations=10 (both rules), unlike the config it came from.
    import json

    original = _config().league(**first)
    for later in [[a] for a in _LATER] + [[a, b] for a in _LATER for b in _LATER]:
        read_back = cairn.AlgorithmConfig.from_dict(json.loads(json.dumps(original.to_dict())))
        assert _outcome(read_back, later) == _outcome(original.copy(), later), (first, later)


def test_a_league_restored_from_a_checkpoint_takes_a_win_rate_rule_as_the_original(tmp_path):
    from tests.league.games import small_league

    config = small_league(snapshot_every_iterations=None)  # no rule named: the default rule
    algo = config.build()
    try:
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    restored.stop()
    assert restored.config.league_config == config.league_config
    assert config.league_config["snapshot_every_iterations"] == 10  # the default rule
    expected = config.copy().league(snapshot_win_rate=0.6).league_config
    assert expected["snapshot_every_iterations"] is None
    assert restored.config.copy().league(snapshot_win_rate=0.6).league_config == expected


def test_a_named_every_10_rule_read_back_counts_as_the_default_rule():
    # The one case the stored dict cannot tell apart (docs/league.md): a named 10 with no
    # win-rate rule is stored as the default rule is, and read back as the default rule.
    named = _config().league(snapshot_every_iterations=10)
    read_back = cairn.AlgorithmConfig.from_dict(named.to_dict())
    assert read_back.league_config == named.league_config
    assert read_back.league(snapshot_win_rate=0.6).league_config["snapshot_every_iterations"] is None
    both = cairn.AlgorithmConfig.from_dict(named.to_dict())  # naming both rules keeps both
    settings = both.league(snapshot_every_iterations=10, snapshot_win_rate=0.6).league_config
    assert settings["snapshot_every_iterations"] == 10 and settings["snapshot_win_rate"] == 0.6


def test_a_fixed_opponent_named_like_a_policy_is_refused():
    # Before, the policy played every game drawn against the fixed opponent of that name (the
    # runner seats a policy first), its games rated and logged under the opponent's name.
    from pettingzoo.classic import connect_four_v3

    env = connect_four_v3.env()
    spec = cairn.PolicySpec(observation_space=env.observation_space("player_0"),
                            action_space=env.action_space("player_0"))
    config = _config().league(opponents={"rnd": "random_legal"}).multi_agent(
        policies={"main": cairn.PolicySpec(), "rnd": spec}, policies_to_train=["main"])
    with pytest.raises(ConfigError, match=r"opponents=.*'rnd'.*also a policy ID"):
        config.validate()


def test_a_policy_added_under_a_fixed_opponent_s_name_is_refused():
    from tests.league.games import small_league

    algo = small_league(opponents={"rnd": "random_legal"}).build()
    try:
        other = cairn.Policy.from_state(algo.get_policy("main").get_state(copy=True))
        with pytest.raises(ConfigError, match=r"add_policy\('rnd'\).*fixed opponent"):
            algo.add_policy("rnd", other)
        assert sorted(algo.policies) == ["main"]
    finally:
        algo.stop()
