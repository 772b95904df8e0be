"""Several Python threads running one session at once get the right answers (the GIL is released
while Kiln runs; runs of one session are serialized inside)."""
import threading

import numpy as np

import kiln


def test_concurrent_runs_agree(mlp_model):
    sess = kiln.InferenceSession(mlp_model)
    rng = np.random.default_rng(11)
    feeds = [rng.standard_normal((1 + i % 5, 4)).astype(np.float32) for i in range(16)]
    expected = [sess.run(["p"], {"x": x})[0] for x in feeds]
    failures = []

    def worker(offset):
        try:
            for r in range(30):
                i = (offset + r) % len(feeds)
                (p,) = sess.run(["p"], {"x": feeds[i]})
                if not np.array_equal(p, expected[i]):
                    failures.append((offset, r, "wrong output"))
        except Exception as e:  # noqa: BLE001 - any failure in a thread is a test failure
            failures.append((offset, -1, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_sessions_in_threads_are_independent(mlp_model):
    results = {}

    def worker(t):
        sess = kiln.InferenceSession(mlp_model)
        x = np.full((t + 1, 4), float(t), np.float32)
        results[t] = sess.run(["y"], {"x": x})[0].shape

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {t: (t + 1, 3) for t in range(4)}
