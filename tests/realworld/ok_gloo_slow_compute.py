"""HEALTHY look-alike of gloo_mismatch.py: a long silent compute between collectives.

Source: the torch.distributed docs (https://docs.pytorch.org/docs/stable/distributed.html):
collectives block until every rank reaches them; a rank that computes longer makes the
others wait, within the process group's timeout.
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend.
Looks like a hang: rank 0 waits in all_reduce for about 7 s, silent, while rank 1 computes
(CPU) before it joins; the launcher waits for both.
Ends: exit 0 after both ranks print the sum.
Run: python ok_gloo_slow_compute.py
"""

import os
import socket
import subprocess
import sys
import time


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    t = torch.ones(4)
    if rank == 1:
        end, a = time.monotonic() + 7, torch.rand(256, 256)
        while time.monotonic() < end:
            a = torch.tanh(a @ a)  # a slow step on one rank
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


def launch(world: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world)},
        )
        for r in range(world)
    ]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        launch(world=2)
