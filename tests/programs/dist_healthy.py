"""Healthy look-alike of dist_mismatch.py / dist_missing.py: two gloo ranks in the same
collectives, with long compute between them (rank 1 computes three times as long, so rank 0
waits in each `all_reduce` for a while), then a barrier; finishes in a few seconds. torch
2.13.0 CPU. Its own launcher, as dist_mismatch.py; `STEPS` in the environment sets the
number of steps (default 6).
"""

import os
import socket
import subprocess
import sys

WORLD_SIZE = 2


def launch() -> int:
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__],
            env={
                **os.environ,
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": str(WORLD_SIZE),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
        )
        for r in range(WORLD_SIZE)
    ]
    return max(p.wait() for p in ranks)


def compute(seconds: float) -> float:
    """Busy work for about `seconds` (a forward/backward pass)."""
    import time

    end, x = time.monotonic() + seconds, 0.0
    while time.monotonic() < end:
        x += sum(i * i for i in range(1000)) * 1e-9
    return x


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grads = torch.ones(4)
    for step in range(int(os.environ.get("STEPS", "6"))):
        compute(0.2 * (1 + 2 * rank))  # rank 1 is the slow one
        dist.all_reduce(grads)
        print(f"rank {rank}: step {step}", flush=True)
    dist.barrier()
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        sys.exit(launch())
