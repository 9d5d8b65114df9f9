"""One torch.distributed (gloo, CPU) rank never reaches the collective: rank 1 blocks in
its own input pipeline (a read of a pipe whose writer never writes, as a data loader stuck
on a dead producer) while rank 0 waits in `all_reduce` of the same step, until gloo's
30-minute timeout. The "one rank is stuck elsewhere, the others wait in a collective"
class of pytorch/pytorch#18689-style reports ("all_gather stuck and no error throw") and of
the NCCL watchdog timeouts where only some ranks report (NVIDIA/Megatron-LM#1207). torch
2.13.0 CPU, Python 3.11. Its own launcher, as dist_mismatch.py.
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
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grads = torch.ones(4)
    producer, batches = os.pipe()  # (read end, write end): nobody writes
    for step in range(3):
        if rank == 1 and step == 2:
            next_batch = os.read(producer, 1)  # never returns: the producer is stuck
            print(f"rank 1: got {next_batch!r}", flush=True)
        dist.all_reduce(grads)
        print(f"rank {rank}: step {step}", flush=True)
    dist.destroy_process_group()
    os.close(batches)


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        sys.exit(launch())
