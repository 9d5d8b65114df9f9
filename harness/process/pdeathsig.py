"""The trainer's first moments: PR_SET_PDEATHSIG(SIGKILL), the host conditions, then exec.

Every process the harness starts to outlive a call (the trainer, a build, a child harness,
`--load`'s busy processes) starts through this script
(`python -I -S pdeathsig.py PARENT_PID STATUS_FD [K=V ...] -- ARGV`, made by
`reaper.pdeathsig_argv`), so it imports only the standard library: no site, no harness
package. It sets PR_SET_PDEATHSIG(SIGKILL) before exec'ing the command: the kernel SIGKILLs
the process itself the moment the harness thread that started it dies, even if the reaper is
gone too. It covers only that one process (the setting is not inherited by its children;
the reaper covers them) and is cleared when the command execs a set-user-ID or
file-capability binary. The host conditions (harness.execute.conditions) are set here, in
the process itself before the exec, so that every thread and child of it inherits them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # the harness side only: the wrapper never imports these
    from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1


def _apply(option: str) -> None:
    """One host condition, set in this process before it execs the command, so that every
    thread and child of it inherits it (harness.execute.conditions makes the options)."""
    key, _, value = option.partition("=")
    if key == "cgroup":  # join the leaf cgroup: "0" is the writing process itself
        with open(os.path.join(value, "cgroup.procs"), "w") as procs:
            procs.write("0")
    elif key == "as":
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(value), int(value)))
    elif key == "cpus":
        cpus: set[int] = set()
        for part in value.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        os.sched_setaffinity(0, cpus)
    else:
        raise OSError(22, f"unknown condition {key!r}")


def exec_with_pdeathsig(
    parent: int, status_fd: int, argv: list[str], options: Sequence[str] = ()
) -> int:
    """The trainer's first moments: ask the kernel for SIGKILL when the harness dies, apply
    the host conditions (`options`: cgroup=DIR, as=BYTES, cpus=LIST), then exec the command;
    on failure, send "ERRNO WHAT" back through `status_fd`."""
    import ctypes  # here: the harness imports this module for its path only

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the harness died before prctl: do not start at all
        return 137
    os.set_inheritable(status_fd, False)  # a successful exec closes it: EOF, no errno
    what = "exec"
    try:
        for option in options:
            what = option.partition("=")[0]
            _apply(option)
        what = "exec"
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(status_fd, f"{exc.errno or 22} {what}\n".encode())
    except ValueError:  # a malformed option: the harness's bug, said as EINVAL
        os.write(status_fd, f"22 {what}\n".encode())
    return 127


def main(args: list[str]) -> int:
    if "--" in args[2:]:
        end = args.index("--", 2)
        return exec_with_pdeathsig(int(args[0]), int(args[1]), args[end + 1 :], args[2:end])
    with contextlib.suppress(OSError):
        os.write(2, b"harness: usage: pdeathsig.py PARENT_PID STATUS_FD [K=V ...] -- ARGV\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
