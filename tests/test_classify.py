"""The classifier on hand-made samples: each mechanism, location choice, and exit kinds.
(The same paths on real processes are covered by test_watch.py and test_run_replica.py.)"""

import os
import re
import subprocess

from harness.analysis import classify
from harness.config.signatures import Pattern, load_signatures
from harness.process import signals
from harness.sampling.model import Frame, SampleSet, ThreadActivity, ThreadStack
from harness.vocab import StackToolName
from harness.watch.watchdog import Trigger
from tests.samples import sample_set

SIGS = load_signatures().with_own(
    [Pattern("env_start", (re.compile(r"env_start(\._omp_fn\.\d+)?"),))]
)


def _samples(threads: list[tuple[int, int, str, float, list[Frame]]]) -> SampleSet:
    activity = [
        ThreadActivity(p, t, "puffer", [s] * 3, cpu, "futex_wait_queue", "202")
        for p, t, s, cpu, _ in threads
    ]
    stacks = [
        ThreadStack(p, t, "puffer", frames, StackToolName.GDB) for p, t, _, _, frames in threads
    ]
    return sample_set(activity=activity, stacks=stacks, tools={"gdb": "used"}, duration_s=1.0)


GOMP_HANG = [
    Frame("futex_wait", "libgomp.so.1"),
    Frame("gomp_barrier_wait_end", "libgomp.so.1"),
    Frame("gomp_team_start", "libgomp.so.1"),
    Frame("GOMP_parallel", "libgomp.so.1"),
    Frame("env_start", "puffer", "src/vecenv.h", 80, own=True),
    Frame("main", "puffer", "src/puffer.c", 300, own=True),
]
SUPERVISOR = [
    Frame("__wait4", "libc.so.6"),
    Frame("supervise_child", "puffer", "src/puffer.c", 50, own=True),
    Frame("main", "puffer", "src/puffer.c", 310, own=True),
]


def test_deadlock_in_env_start_ignores_the_waiting_supervisor() -> None:
    s = _samples([(10, 10, "S", 0.0, SUPERVISOR), (11, 11, "S", 0.0, GOMP_HANG)])
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.kind, v.mechanism, v.location) == ("hang", "deadlock", "env_start")
    assert v.runtime[:2] == ["libgomp parallel region", "libgomp team start"]
    assert "futex wait" in v.runtime
    assert v.location_frames[0].startswith("env_start")
    assert v.exit_code == 2


def test_the_hazards_shims_wrapper_is_not_shown_as_the_programs_place() -> None:
    """Under --hazards a mutex wait passes through the shim's pthread_mutex_lock: a real
    frame, but the frames line names the program's call into libc, not the harness's."""
    shim = Frame("pthread_mutex_lock", "/c/libpuffer-hazards.so", "hazards.c", 622)
    shim.runtime = "harness-shim"
    stack = [
        Frame("__futex_abstimed_wait_common", "libc.so.6"),
        Frame("___pthread_mutex_lock", "libc.so.6"),
        shim,
        Frame("update_model", "mixer", "mixer.c", 30, own=True),
        Frame("main", "mixer", "mixer.c", 50, own=True),
    ]
    v = classify.classify_hang(_samples([(10, 10, "S", 0.0, stack)]), "no progress", SIGS)
    assert v.location == "update_model"
    assert v.location_frames and not any("hazards.c" in f for f in v.location_frames)
    assert any("pthread_mutex_lock" in f for f in v.location_frames), v.location_frames


def test_spin_names_the_busy_thread() -> None:
    busy = [
        Frame("spin_forever", "busy", "busy_spin.c", 9, own=True),
        Frame("main", "busy", own=True),
    ]
    s = _samples([(20, 20, "R", 0.98, busy)])
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.mechanism, v.location) == ("spin", "spin_forever")


def test_exit_blocked_when_main_thread_is_a_zombie() -> None:
    worker = [
        Frame("__futex_abstimed_wait_common", "libc.so.6"),
        Frame("pthread_cond_wait", "libc.so.6"),
        Frame("wait_for_shutdown", "prog", own=True),
    ]
    s = _samples([(30, 30, "Z", 0.0, []), (30, 31, "S", 0.0, worker)])
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.mechanism, v.location) == ("exit-blocked", "wait_for_shutdown")
    assert "condition variable" in v.runtime


def test_stopped_process() -> None:
    s = _samples([(40, 40, "T", 0.0, [])])
    assert classify.classify_hang(s, "no progress", SIGS).mechanism == "stopped"


def test_exit_kinds() -> None:
    tail = ["epoch 1", "missing key [?] util/gpu_percent"]
    v = classify.classify_exit(1, tail, SIGS)
    assert v.kind == "error-exit" and "util/gpu_percent" in v.summary and v.exit_code == 3
    assert classify.classify_exit(-11, [], SIGS).kind == "crash"
    assert "SIGABRT" in classify.classify_exit(134, [], SIGS).summary  # 128+6 via a wrapper
    assert classify.classify_exit(0, [], SIGS).kind == "pass"


def test_wall_timeout_while_progressing_is_not_a_hang() -> None:
    v = classify.classify(Trigger.WALL, "wall", None, True, None, [], SIGS)
    assert v.kind == "timeout-progressing" and v.exit_code == 6
    v = classify.classify(Trigger.WALL, "wall", None, False, None, [], SIGS)
    assert v.kind == "hang"


def test_one_signal_table_for_exit_events_and_crash_verdicts() -> None:
    """A real SIGKILLed process: the watch loop's exit event (from Popen's returncode or a
    zombie's wait status) and the crash verdict name the signal the same way."""
    killed = subprocess.run(["sh", "-c", "kill -KILL $$"], check=False)
    ending = signals.from_returncode(killed.returncode)
    assert ending == signals.Ending(signal=9) and ending.known and ending.failed
    assert ending.words() == "killed by SIGKILL"
    verdict = classify.classify_exit(killed.returncode, [], load_signatures())
    assert verdict.summary == "crash: killed by SIGKILL"
    pid = os.spawnv(os.P_NOWAIT, "/bin/sh", ["sh", "-c", "exit 3"])
    _, status = os.waitpid(pid, 0)
    exited = signals.from_wait_status(status)
    assert exited == signals.Ending(exit_code=3) and exited.words() == "exited 3"
    assert signals.from_returncode(0).failed is False
    assert signals.UNKNOWN.words() == "exited, status unknown" and not signals.UNKNOWN.known
    assert signals.signal_name(200) == "signal 200"
