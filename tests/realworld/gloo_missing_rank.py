"""torch.distributed (gloo): world size larger than the ranks launched; init never returns.

Source: pytorch/pytorch#23074 "Hang at initializing DistributedDataParallel"
(https://github.com/pytorch/pytorch/issues/23074): "init_process_group would try to
rendezvous 4 processes with ranks 0, 1, 2, 3 ... so it hangs as it never sees 2 and 3";
the same in pytorch/pytorch#52848 and #49846.
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend (default timeout 30 min).
Hang: WORLD_SIZE=3 but only ranks 0 and 1 are started (a miscounted launch); both wait in
init_process_group for rank 2's address in the TCPStore (rank 0 hosts the store). The
launcher waits for both. Output stops after "rank N: init".
Run: python gloo_missing_rank.py
"""

import os
import socket
import subprocess
import sys


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    print(f"rank {os.environ['RANK']}: init", flush=True)
    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


def launch(world: int, started: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world)},
        )
        for r in range(started)
    ]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        launch(world=3, started=2)  # the bug: one node's ranks were never started
