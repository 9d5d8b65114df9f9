"""torch.distributed (gloo) under torch.multiprocessing.spawn: uneven shards, one rank in a
collective the other never joins.

Source: k2-fsa/snowfall#152 "DDP address in use" (https://github.com/k2-fsa/snowfall/issues/152):
"if different nodes have a different number of utterances in its dataloader, the node with
most utterances will hang in the end ... the node with most utterances waits inside
allreduce", its reproducer started with `mp.spawn(run, args=(world_size,), nprocs=...)`;
pytorch/pytorch#33148 "Support uneven DDP inputs" (the same hang, and the Join API that
came of it).
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend (default timeout 30 min).
Hang: rank 0 has one batch more than rank 1 and waits in its third all_reduce; rank 1 is done
and waits in the barrier before destroy_process_group. The ranks are started by
torch.multiprocessing.spawn, which passes the rank as an argument (no RANK, no WORLD_SIZE,
no MASTER_ADDR in their environment: init_method is tcp://), so only their
init_process_group call says which rank is which. The spawning parent waits in join().
Run: python gloo_spawn_uneven.py
"""

import socket


def run(rank: int, world_size: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    batches = 3 if rank == 0 else 2  # the shard of rank 0 has one batch more
    t = torch.ones(4)
    for step in range(batches):
        dist.all_reduce(t)  # the gradient all-reduce of one step
        print(f"rank {rank}: step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from torch.multiprocessing.spawn import spawn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(run, args=(2, port), nprocs=2)  # type: ignore[no-untyped-call]
