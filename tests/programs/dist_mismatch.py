"""Two torch.distributed (gloo, CPU) ranks in different collectives: rank 0 calls
`all_reduce`, rank 1 `broadcast`; neither returns (gloo's default timeout is 30 min). The
shape of the "Detected mismatch between collectives on ranks" reports that
TORCH_DISTRIBUTED_DEBUG=DETAIL turns into errors (pytorch/pytorch#79901; seen in
Lightning-AI/pytorch-lightning#19106: ranks logging different keys, one rank in BROADCAST
while the other is elsewhere). torch 2.13.0 CPU, Python 3.11.

Run as `python dist_mismatch.py`: it is its own launcher (as torchrun, it starts WORLD_SIZE
ranks with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in their environment,
and waits for them). `DIST_TIMEOUT_S` in the environment sets the process group's timeout:
then gloo prints "Timed out waiting …ms for recv operation" on both ranks, which exit 1.
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


def rank_main() -> None:
    import datetime

    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT_S", "1800")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    metrics = torch.ones(4)
    print(f"rank {rank}: syncing metrics", flush=True)
    if rank == 0:
        dist.all_reduce(metrics)  # rank 0 reduces ...
    else:
        dist.broadcast(metrics, src=0)  # ... while rank 1 waits for a broadcast
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        sys.exit(launch())
