"""The Python half of `--hazards` (docs/hazards.md), written for puffer-harness.

The harness puts this folder first on PYTHONPATH of the program it runs, so every Python
process of the run imports this module at start-up (site.py imports `sitecustomize`). It
records, into $HARNESS_HAZARDS_DIR/python-<pid>.jsonl:

- `fork`: an os.fork() (multiprocessing's fork start method included) while other threads
  are alive: the forking thread's Python stack, and every other thread's name, native id,
  target, Python stack and the threading locks it held at that moment;
- `child`: that fork's child, before any exec, waiting for one of those locks (the copy the
  fork left taken: it never comes free in the child);
- `edge`: a new lock-order edge between two locks of threading (Lock, RLock: the locks of
  logging, queue, concurrent.futures and user code made after start-up): the lock held,
  the lock taken, and where each was taken (the first frame outside threading itself).

Then it imports the `sitecustomize` the program would have imported without the harness (a
later one on sys.path), so a site's own customisation still runs. It never raises into the
program: every hook swallows its own errors, and the functions it uses are taken at import.
"""

from __future__ import annotations

import os
import sys

_DIR = os.environ.get("HARNESS_HAZARDS_DIR", "")
_HERE = os.path.dirname(os.path.abspath(__file__))
_MAX_EDGES = 4096
_MAX_FORKS = 64
_MAX_FRAMES = 24
_MAX_HELD = 16  # locks a thread holds that are kept (a deeper stack is counted, not kept)


def _chain() -> None:
    """Import the next sitecustomize on sys.path (the one this module shadows)."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py does with an error in sitecustomize
        print(f"Error in sitecustomize (after the harness's): {exc!r}", file=sys.stderr)


def _install() -> None:  # one closure over the hook's state, on purpose
    import _thread
    import contextlib
    import itertools
    import json
    import threading
    import traceback
    import types

    write, open_, getpid = os.write, os.open, os.getpid
    dumps, current_frames, get_ident = json.dumps, sys._current_frames, _thread.get_ident
    getframe, native_id = sys._getframe, threading.get_native_id
    state = {"fd": -1, "pid": -1, "forks": 0, "edges": 0}
    threading_file = threading.__file__
    serials = itertools.count(1)  # a lock's identity: ids of dead locks come back
    known: dict[tuple[int, int], int] = {}  # edge -> the thread that took it first, or 0:
    # a second thread taking it is recorded once (a cycle needs two threads), then it is 0
    # thread ident -> the locks it holds, innermost last: (lock, site); shared, so a fork
    # can say what the other threads held (each thread changes only its own list)
    holding: dict[int, list[tuple[object, list[object]]]] = {}
    fork_held: dict[int, list[object]] = {}  # in a forked child: lock serial -> its holder
    child_of: dict[str, int] = {"seq": 0, "said": 0, "parent": 0}

    def emit(record: dict[str, object]) -> None:
        pid = getpid()
        if state["pid"] != pid:  # a forked child writes a file of its own
            state["pid"], state["forks"], state["edges"] = pid, 0, 0
            path = os.path.join(_DIR, f"python-{pid}.jsonl")
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                state["fd"] = open_(path, flags, 0o600)
            except OSError:
                state["fd"] = -1
        if state["fd"] < 0:
            return
        data = (dumps(record, default=str) + "\n").encode("utf-8", "replace")
        while data:  # bounded: a write of nothing or an error ends it
            n = write(state["fd"], data)
            if n <= 0:
                return
            data = data[n:]

    def frames_of(frame: object) -> list[list[object]]:
        if frame is None:
            return []
        summary = traceback.extract_stack(frame, limit=_MAX_FRAMES)  # type: ignore[arg-type]
        return [[f.filename, f.lineno, f.name] for f in reversed(summary)]

    def lock_name(lock: object) -> str:
        return str(getattr(lock, "_hz_name", "") or "")

    def before_fork() -> None:
        try:
            fork_held.clear()
            if state["forks"] >= _MAX_FORKS:
                return
            me = get_ident()
            others = [t for t in threading.enumerate() if t.ident != me]
            try:
                tasks = len(os.listdir("/proc/self/task"))
            except OSError:
                tasks = 1 + len(others)
            if not others and tasks <= 1:
                return
            state["forks"] += 1
            frames = current_frames()
            threads = []
            for t in others:
                target = getattr(t, "_target", None)
                name = getattr(target, "__qualname__", None) or type(t).__qualname__
                held = []
                for lock, where in list(holding.get(t.ident or -1, ())):
                    fork_held[getattr(lock, "_hz_serial", 0)] = [t.name, where]
                    held.append({"lock": lock_name(lock), "site": where})
                threads.append(
                    {
                        "name": t.name,
                        "native_id": t.native_id,
                        "daemon": t.daemon,
                        "target": f"{getattr(target, '__module__', '')}.{name}".lstrip("."),
                        "stack": frames_of(frames.get(t.ident or -1)),
                        "held": held,
                    }
                )
            child_of["seq"] = state["forks"]
            emit(
                {
                    "event": "fork",
                    "pid": getpid(),
                    "tid": native_id(),
                    "seq": state["forks"],
                    "tasks": tasks,
                    "stack": frames_of(getframe(1)),
                    "threads": threads,
                }
            )
        except Exception:
            pass

    def after_in_child() -> None:
        try:
            # the other threads are gone; the forking thread still holds what it held
            mine = holding.get(get_ident())
            holding.clear()
            if mine:
                holding[get_ident()] = mine
            child_of["said"] = 0
            child_of["parent"] = state["pid"]
        except Exception:
            pass

    # the parent keeps no list of what was held at its fork: only the child's copies stay taken
    os.register_at_fork(
        before=before_fork, after_in_parent=fork_held.clear, after_in_child=after_in_child
    )

    def on_audit(event: str, _args: tuple[object, ...]) -> None:
        # an exec ends the child's copy of the parent: nothing held at the fork matters now
        if event == "os.exec" and fork_held:
            fork_held.clear()

    with contextlib.suppress(Exception):
        sys.addaudithook(on_audit)

    # ---- lock order over threading's locks

    def site() -> list[object]:
        """The first frame outside this module and threading (a `with lock:` line)."""
        f: types.FrameType | None = getframe(2)
        while f is not None and f.f_code.co_filename in (__file__, threading_file):
            f = f.f_back
        if f is None:
            return ["?", 0, "?"]
        return [f.f_code.co_filename, f.f_lineno, f.f_code.co_name]

    def still_held(lock: object) -> bool:
        """Whether a lock this thread took is still taken (a Lock may be released by
        another thread: such a release never reached this thread's list)."""
        inner = getattr(lock, "_lock", None)
        try:
            if hasattr(inner, "_is_owned"):
                return bool(inner._is_owned())  # type: ignore[union-attr]
            return bool(inner.locked())  # type: ignore[union-attr]
        except Exception:
            return True

    def child_waits(lock: object) -> None:
        """In a forked child, before taking a lock: one that another thread held at the
        fork is taken in this copy for ever."""
        holder = fork_held.get(getattr(lock, "_hz_serial", 0))
        if holder is None or child_of["said"]:
            return
        child_of["said"] = 1
        emit(
            {
                "event": "child",
                "pid": getpid(),
                "parent": child_of.get("parent", 0),
                "seq": child_of["seq"],
                "lock": lock_name(lock),
                "holder": holder[0],
                "held_site": holder[1],
                "site": site(),
            }
        )

    def taking(lock: object, ordered: bool) -> list[object]:
        """Before a lock is asked for: the edges from every lock this thread holds (before
        the wait, lockdep's order: a run that deadlocks on it has them too); its site."""
        where: list[object] = ["?", 0, "?"]
        try:
            me = get_ident()
            held = holding.get(me)
            if held is None:
                held = holding[me] = []
            where = site()
            if held and not all(still_held(h) for h, _ in held):
                held[:] = [(h, s) for h, s in held if still_held(h)]
            if ordered and held and state["edges"] < _MAX_EDGES:
                serial = getattr(lock, "_hz_serial", 0)
                for other, other_site in held:
                    if other is lock:
                        continue
                    key = (getattr(other, "_hz_serial", 0), serial)
                    first = known.get(key)
                    if first is not None and first in (0, me):
                        continue
                    known[key] = 0 if first is not None else me
                    state["edges"] += 1
                    emit(
                        {
                            "event": "edge",
                            "pid": getpid(),
                            "tid": native_id(),
                            "thread": threading.current_thread().name,
                            "held": [key[0], lock_name(other)],
                            "taken": [serial, lock_name(lock)],
                            "held_site": other_site,
                            "taken_site": where,
                            "stack": frames_of(getframe(2)),
                        }
                    )
        except Exception:
            pass
        return where

    def took(lock: object, where: list[object]) -> None:
        try:
            held = holding.setdefault(get_ident(), [])
            if len(held) < _MAX_HELD:
                held.append((lock, where))
        except Exception:
            pass

    def released(lock: object) -> None:
        try:
            me = get_ident()
            held = holding.get(me) or []
            for i in range(len(held) - 1, -1, -1):
                if held[i][0] is lock:
                    del held[i]
                    break
            if not held:  # bounded: a thread that holds nothing has no entry
                holding.pop(me, None)
        except Exception:
            pass

    class _Tracked:
        """A threading lock that tells the lock-order graph when it is taken and released."""

        __slots__ = ("__weakref__", "_hz_name", "_hz_serial", "_lock")

        def __init__(self, lock: object, name: str) -> None:
            self._lock = lock
            self._hz_name = name
            self._hz_serial = next(serials)

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if fork_held:
                child_waits(self)
            # a try (non-blocking or timed) cannot wait for ever: held, no edge
            where = taking(self, bool(blocking) and timeout < 0)
            ok = self._lock.acquire(blocking, timeout)  # type: ignore[attr-defined]
            if ok:
                took(self, where)
            return bool(ok)

        def release(self) -> None:
            self._lock.release()  # type: ignore[attr-defined]
            released(self)

        __enter__ = acquire

        def __exit__(self, *exc: object) -> None:
            self.release()

        def locked(self) -> bool:
            return bool(self._lock.locked())  # type: ignore[attr-defined]

        def _at_fork_reinit(self) -> None:
            self._lock._at_fork_reinit()  # type: ignore[attr-defined]
            released(self)  # made anew, unlocked: no longer held by anyone

        def __repr__(self) -> str:
            return f"<tracked {self._lock!r}>"

    class _TrackedR(_Tracked):
        __slots__ = ()

        # threading.Condition over an RLock saves and restores its recursion level
        def _release_save(self) -> object:
            saved = self._lock._release_save()  # type: ignore[attr-defined]
            released(self)
            return saved

        def _acquire_restore(self, saved: object) -> None:
            self._lock._acquire_restore(saved)  # type: ignore[attr-defined]
            took(self, taking(self, False))

        def _is_owned(self) -> bool:
            return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    def creator() -> str:
        f: types.FrameType | None = getframe(2)
        while f is not None and f.f_code.co_filename in (__file__, threading_file):
            f = f.f_back
        return f"{f.f_code.co_filename}:{f.f_lineno}" if f else ""

    real_lock, real_rlock = threading.Lock, threading.RLock
    lock_types = (type(_thread.allocate_lock()), _Tracked)
    rlock_types = (type(real_rlock()), _TrackedR)

    class _Factory(type):
        """threading.Lock and RLock as classes again (3.13 made Lock one): calling one makes
        a tracked lock; isinstance accepts tracked and plain locks alike."""

        def __call__(cls, *args: object, **kwargs: object) -> object:
            if cls is _LockClass:
                return _Tracked(real_lock(), creator())
            return _TrackedR(real_rlock(*args, **kwargs), creator())

        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, lock_types if cls is _LockClass else rlock_types)

    class _LockClass(metaclass=_Factory):
        pass

    class _RLockClass(metaclass=_Factory):
        pass

    _LockClass.__name__ = _LockClass.__qualname__ = "Lock"
    _RLockClass.__name__ = _RLockClass.__qualname__ = "RLock"
    threading.Lock = _LockClass  # type: ignore[assignment]
    threading.RLock = _RLockClass  # type: ignore[assignment]


def _start() -> None:
    """Install the hook; the program runs on without it when anything fails."""
    if not _DIR.startswith("/"):
        return
    try:
        _install()
    except Exception:
        return


_start()
_chain()
