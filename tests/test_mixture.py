"""The mixed profile (issue 37): every workload profile in one input stream, its shares following what each
finds per second; its figures reach ``run``'s summary, ``status`` and the dashboard."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest

from fuzz.cli import main
from fuzz.model.scenario import load_scenario
from fuzz.report.dashboard import render_dashboard
from fuzz.report.status_table import format_table
from fuzz.search.generate import random_scenario, serial_steps
from fuzz.search.libfuzzer import PROFILES_LINE, Progress, sum_profiles
from fuzz.search.mixture import HOME_BIAS, Mixture, Novelty, draw_scenario, floor_of
from fuzz.search.mutate import decode, encode
from fuzz.search.profiles import DEFAULT_PROFILE, MIXED, PREFILL, PROFILES, home_of, max_steps_of_profile
from fuzz.search.settings import RunSettings
from fuzz.store.stats import PROFILE_PREFIX, StatsRow, actor_rows, latest_by_actor, totals, totals_over_time


def test_the_default_is_the_mixture_of_every_profile() -> None:
    assert DEFAULT_PROFILE == MIXED == RunSettings().profile
    assert RunSettings().max_steps == max_steps_of_profile(MIXED) == max(p.max_steps for p in PROFILES.values())
    assert max_steps_of_profile("prefill") == PREFILL.max_steps == 256


def test_novelty_counts_each_block_and_hit_count_bucket_once() -> None:
    novelty = Novelty(4)
    assert novelty.new_features(np.array([1, 0, 0, 0], dtype=np.uint8)) == 1
    assert novelty.new_features(np.array([1, 0, 0, 0], dtype=np.uint8)) == 0
    assert novelty.new_features(np.array([5, 6, 0, 0], dtype=np.uint8)) == 2  # 4-7 bucket of block 0, block 1
    assert novelty.new_features(np.array([1, 7, 200, 255], dtype=np.uint8)) == 2  # 128+ of blocks 2 and 3
    assert novelty.new_features(np.array([2, 3, 128, 130], dtype=np.uint8)) == 2  # buckets 2 and 3 are new


def test_an_input_is_credited_to_the_profile_that_made_it_and_a_corpus_input_to_none() -> None:
    mixture = Mixture()
    seed_input = encode(random_scenario(random.Random(1)))
    mixture.observe(seed_input, 0.5, 100, 0)  # from the corpus: no profile made it
    assert sum(a.execs for a in mixture.arms.values()) == 0
    for seed in range(30):
        out = mixture.mutate(seed_input, 1 << 20, seed)
        maker = mixture._made[next(reversed(mixture._made))]
        before = mixture.arms[maker].execs
        mixture.observe(out, 0.01, 1, 0)
        assert mixture.arms[maker].execs == before + 1
    assert sum(a.execs for a in mixture.arms.values()) == 30 == sum(a.features for a in mixture.arms.values())


def test_shares_keep_a_floor_and_follow_yield_per_second() -> None:
    mixture = Mixture()
    for _ in range(200):
        mixture._remember(b"chat", "chat")
        mixture.observe(b"chat", 0.2, 30, 0)  # 150 features a second
        mixture._remember(b"prefill", "prefill")
        mixture.observe(b"prefill", 0.02, 0, 0)  # nothing new
    shares = mixture.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(shares[name] >= floor_of(p) - 1e-9 for name, p in PROFILES.items())
    assert shares["chat"] == max(shares.values()) and shares["chat"] > 2 * shares["prefill"]


def test_a_profile_is_drawn_for_its_share_of_time_so_cheap_inputs_get_more_draws() -> None:
    mixture = Mixture()
    for name, seconds in (("prefill", 0.01), ("chat", 0.1), ("agentic", 0.1), ("batch", 0.1)):
        arm = mixture.arms[name]
        arm.gain, arm.seconds, arm.inputs = 10.0, 10.0, 10.0 / seconds  # equal yield per second
    shares = mixture.shares()
    draws = Counter(mixture.choose(random.Random(i)) for i in range(4000))
    expected = (shares["prefill"] / 0.01) / (shares["chat"] / 0.1)  # each profile's share of the seconds
    assert draws["prefill"] > draws["chat"] and draws["prefill"] / draws["chat"] == pytest.approx(expected, rel=0.3)


def test_a_home_profile_starts_with_the_larger_share() -> None:
    shares = Mixture(home="batch").shares()
    assert shares["batch"] == max(shares.values()) and HOME_BIAS > 1
    assert [home_of(i, 2) for i in range(2)] == ["prefill", "chat"] and home_of(0, 1) is None


def test_crossover_crosses_prefill_sized_parents_and_mutates_a_deep_one() -> None:
    mixture = Mixture()
    small = encode(random_scenario(random.Random(3)))
    deep = next(s for i in range(200) if serial_steps(s := random_scenario(random.Random(i), PROFILES["chat"]))
                > PREFILL.max_steps)
    crossed = mixture.crossover(small, small, 1 << 20, 5)
    assert serial_steps(decode(crossed)) <= PREFILL.max_steps
    for seed in range(10):
        child = decode(mixture.crossover(encode(deep), small, 1 << 20, seed))
        assert serial_steps(child) <= mixture.max_steps  # a mutation of the deep parent, within the bound


def test_the_mixtures_generator_draws_every_profiles_scenarios(tmp_path) -> None:
    rng = random.Random(11)
    outputs = [max(r.max_tokens for r in draw_scenario(rng, MIXED).requests) for _ in range(40)]
    assert min(outputs) <= 8 < max(outputs)
    assert main(["gen", "--seed", "2", "--count", "6", "--out", str(tmp_path)]) == 0
    for f in tmp_path.glob("*.json"):
        load_scenario(f)


def test_the_prefill_profile_pins_the_old_default_and_the_old_name_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["gen", "--out", "x", "--profile", "default"])
    assert stop.value.code == 2 and "--profile" in capsys.readouterr().err


def test_workers_profile_figures_are_summed_and_survive_their_worker() -> None:
    progress = Progress()
    one = {"prefill": {"execs": 10, "seconds": 1.0, "features": 5, "findings": 0, "share": 0.6},
           "chat": {"execs": 2, "seconds": 2.0, "features": 9, "findings": 1, "share": 0.4}}
    progress.feed(0, f"{PROFILES_LINE} {json.dumps(one)}")
    progress.feed(1, f"{PROFILES_LINE} {json.dumps(one)}")
    progress.retire(0)
    total = progress.profiles()
    assert total["prefill"]["execs"] == 20 and total["chat"]["findings"] == 2 and total["chat"]["share"] == 0.4
    progress.retire(1)
    assert progress.profiles()["chat"]["share"] == 0.4  # the last worker's shares, once none runs
    assert sum_profiles([], []) == {}


def test_status_and_the_dashboard_show_each_profile_and_count_it_in_no_total(tmp_path) -> None:
    rows = [StatsRow(100.0, "fuzzer-0", execs=50, coverage=7),
            StatsRow(100.0, PROFILE_PREFIX + "chat", execs=20, seconds=4.0, coverage=300, findings=1, share=0.3,
                     homes="fuzzer-1"),
            StatsRow(100.0, PROFILE_PREFIX + "prefill", execs=30, seconds=1.0, coverage=90, share=0.7,
                     homes="fuzzer-0")]
    latest = latest_by_actor(rows)
    assert list(actor_rows(latest)) == ["fuzzer-0"]
    assert totals(actor_rows(latest).values()).execs == 50 and totals_over_time(rows)[-1].execs == 50
    table = format_table(latest, 110.0)
    assert "profile chat (home of fuzzer-1): 20 inputs in 4.0s, 300 new features, 1 new signatures, share now 30%" \
        in table
    page = render_dashboard(rows, [], tmp_path, 110.0)
    assert "Workload profiles" in page and "fuzzer-1" in page


def test_a_deep_profile_mutates_its_own_productive_inputs_too() -> None:
    mixture = Mixture()
    deep = encode(random_scenario(random.Random(4), PROFILES["batch"]))
    mixture._remember(deep, "batch")
    mixture.observe(deep, 0.3, 5, 0)  # new features: batch keeps it as a parent of its own
    assert list(mixture.arms["batch"].parents) == [deep]
    mixture._remember(b"nothing new", "chat")
    mixture.observe(b"nothing new", 0.3, 0, 0)
    assert not mixture.arms["chat"].parents and not mixture.arms["prefill"].parents
