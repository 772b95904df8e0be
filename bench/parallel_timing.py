"""Wall time of several Python threads running one session at once (bench/python_parallel_runs*.py)."""
import threading
import time


def timed(sess, feeds, threads, runs):
    """Wall seconds for `threads` threads each running sess `runs` times, started together."""
    barrier = threading.Barrier(threads + 1)

    def work():
        barrier.wait()
        for _ in range(runs):
            sess.run(None, feeds)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - start
