"""The online queue under a rate limiter, from Python (tests/test_online_reset.cpp has the C++ side): a learner that
waits for fresh online steps, samples, and resets the online queue while writers that wait for the limiter fill its
budget in between. reset_online_queue(to="sampled") keeps the steps published since the sample, so both sides go
on; to="now" (the default) drops them and leaves both waiting (the main job's stall, issue 30)."""
import numpy as np
import pytest

import shmreplay

ENVS = 8


def push_until_held_back(writer):
    ids, data, steps = np.arange(ENVS, dtype=np.int32), {"x": np.zeros(ENVS, np.float32)}, 0
    while True:
        try:
            writer.push(ids, data)
        except shmreplay.RateLimited:
            return steps
        steps += ENVS


def test_a_learner_that_waits_for_online_steps_goes_on_when_writers_fill_the_limiter_before_its_reset(name):
    # bounds -60 .. 68; 16 fresh steps and 8 + 8 rows per update; writers push 8 steps at a time
    buf = shmreplay.Buffer.create(name, ENVS, 1024, "x:f32", rate_limit=shmreplay.RateLimit.ratio(1 / 16, 64, 64))
    with shmreplay.Writer.range(buf, 0, ENVS, wait_for_rate_limit=True, rate_limit_timeout=0) as w, \
            shmreplay.Sampler(buf, seed=1) as s:
        batch = s.new_batch(16, 4)
        assert push_until_held_back(w) == 1088
        for _ in range(10):
            assert s.wait("online", 16, timeout=0)
            s.sample_mixed(8, 8, 4, 1.0, rate_limit_timeout=0, out=batch)
            sampled = int(buf.heads().sum())
            assert push_until_held_back(w) == 256  # the learner was descheduled: the writers filled the budget
            s.reset_online_queue(to="sampled")
            assert s.size("online") == int(buf.heads().sum()) - sampled >= 16
        s.reset_online_queue()  # to="now": nothing can come any more
        assert s.size("online") == 0 and push_until_held_back(w) == 0
        assert not s.wait("online", 16, timeout=0.05)


def test_reset_online_queue_names_what_it_expects(name):
    buf = shmreplay.Buffer.create(name, 1, 8, "x:f32")
    with shmreplay.Sampler(buf) as s:
        with pytest.raises(ValueError, match="unknown to='later': expected 'now' or 'sampled'"):
            s.reset_online_queue(to="later")
        s.reset_online_queue(to="now")
        s.reset_online_queue("sampled")
