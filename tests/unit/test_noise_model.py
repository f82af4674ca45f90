"""The simulated node's measured noise (sim/noise_model.py) follows ../shared/reference/real-gpu-noise.md."""

import statistics

from orchestrator.sim import noise_model as nm


def _shapes(n=400):
    return [(f"a8w8_blockscale|gfx950|256|k={k}|m={m}|n={n_}", m)
            for i in range(n) for m, n_, k in [((1, 8, 32, 128, 512, 2048, 8192)[i % 7], 1536 + i, 7168)]]


def test_sd_by_size_follows_the_table():
    assert nm.median_sd_pct(1) == 1.06 and nm.median_sd_pct(2048) == 0.17 and nm.median_sd_pct(1e6) == 0.59
    assert 0.63 > nm.median_sd_pct(1024) > 0.17           # log-interpolated between rows
    sds = [nm.shape_sd_pct(k, m) for k, m in _shapes()]
    assert 0.5 < statistics.median(sds) < 1.0              # measured: median 0.75 %
    over2 = sum(s > 2 for s in sds) / len(sds)
    over3 = sum(s > 3 for s in sds) / len(sds)
    assert 0.08 < over2 < 0.30 and 0.03 < over3 < 0.15    # measured: 12/56 over 2 %, 5/56 over 3 %
    assert max(sds) <= nm.SD_CAP_PCT


def test_between_process_sd_matches_the_shape_sd_and_is_deterministic():
    key, m = "a8w8|gfx950|256|k=7168|m=32|n=4096", 32
    errs = [nm.rel_error(key, m, seed=1, process=p) * 100 for p in range(2000)]
    sd = nm.shape_sd_pct(key, m)
    assert abs(statistics.pstdev(errs) / sd - 1.0) < 0.25  # tails widen it a little
    assert errs == [nm.rel_error(key, m, seed=1, process=p) * 100 for p in range(2000)]
    assert errs != [nm.rel_error(key, m, seed=2, process=p) * 100 for p in range(2000)]
    assert sum(e > 3 * sd for e in errs) > sum(e < -3 * sd for e in errs)   # the tails are slow ones


def test_a_process_level_is_shared_by_its_shapes():
    keys = [k for k, _ in _shapes(60)]
    a = [[nm.rel_error(k, 64, 0, p) * 100 / nm.shape_sd_pct(k, 64) for k in keys] for p in range(300)]
    means = [statistics.fmean(row) for row in a]
    # a process mean over 60 shapes keeps the shared level's share of the variance (0.3 of ~0.68)
    assert 0.1 < statistics.pvariance(means) < 0.4
    assert nm.noisy_us(10.0, keys[0], 1, 0, 3) == nm.noisy_us(10.0, keys[0], 1, 0, 3) > 0
