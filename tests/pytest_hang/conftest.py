"""With HANG_SUBREAPER=1 the session's pytest makes itself a child subreaper before any
test (as a harness, a container init or systemd-run would): an orphan of its tree, such as
the plugin's watcher once its launcher exits, is then adopted by pytest itself."""

import ctypes
import os

PR_SET_CHILD_SUBREAPER = 36

if os.environ.get("HANG_SUBREAPER") == "1":
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
