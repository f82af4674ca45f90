"""Engaged at runtime (issue 37): one fresh sample is corroboration judged against the noise, not a coin flip
between two medians."""

from orchestrator.steps.engage import time_says_stale


def test_a_hit_line_wins_over_a_sample_inside_the_noise():
    # before 100, after 97 (a 3 % gain), noise 1 %: a fresh 99 is nearer before, yet inside 3.75 sd of after
    assert not time_says_stale(99.0, 100.0, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, 100.0, 97.0, 1.0, hit=False)          # no lookup line: the old rule


def test_a_sample_far_beyond_the_noise_still_says_stale():
    # a 20 % gain: a fresh time at the before level is 25 % off the after median, far past 3.75 x 1 %
    assert time_says_stale(100.2, 100.0, 80.0, 1.0, hit=True)
    assert not time_says_stale(80.5, 100.0, 80.0, 1.0, hit=True)


def test_missing_figures_are_never_engaged_by_time():
    assert time_says_stale(None, 100.0, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, None, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, 100.0, 97.0, None, hit=True)           # no noise: the old rule (nearer before)
    assert time_says_stale(99.0, 100.0, 97.0, float("nan"), hit=True)
