import atexit
from concurrent.futures import ThreadPoolExecutor

# healthy: an executor left without shutdown (its workers are not daemons); Python's exit
# ends them, and the atexit handlers (coverage, logging) run
atexit.register(print, "case_pool: atexit ran", flush=True)
POOL = ThreadPoolExecutor(max_workers=2)


def test_pool_left_running():
    assert POOL.submit(sum, [1, 2]).result() == 3
