"""torch.distributed (gloo) under torch.multiprocessing.spawn: validation on rank 0 only
through the DDP model, the other rank waits in the barrier after it.

Source: pytorch/pytorch#54059 "Using torch.distributed.barrier() makes the whole code
hang" ("Run the validation step on just one GPU, and use torch.distributed.barrier() to
make the other processes wait until validation is done"; the workaround found there: run
validation on every rank); jpata/particleflow#233 "Fixing ddp.dist.barrier() hang by
running validation forward pass using model.module() instead of model()".
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend.
Hang: both ranks train a step of a DistributedDataParallel model with a BatchNorm layer
(buffers), then only rank 0 validates, calling model(x): DDP's forward first broadcasts
the module buffers from rank 0, a collective rank 1 never joins. Rank 1 waits in
dist.barrier(). Each waits in gloo for the other's message, until the process group's
timeout (init_process_group(..., timeout=timedelta(minutes=30)), as users write it). The
ranks are started by torch.multiprocessing.spawn (rank an argument, init_method tcp://);
the spawning parent waits in join(). No CPU, no output after the "step" lines.
Run: python tw_gloo_ddp_eval_rank0.py
"""

import socket
from datetime import timedelta


def run(rank: int, world_size: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=30),
    )
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(16, 8)).pow(2).mean()  # one training step, every rank
    loss.backward()
    opt.step()
    print(f"rank {rank}: step 0", flush=True)
    if rank == 0:  # validate on one rank only
        model.eval()
        with torch.no_grad():
            val = model(torch.randn(16, 8)).pow(2).mean()  # DDP syncs buffers here
        print(f"rank 0: val {val.item():.3f}", flush=True)
        model.train()  # type: ignore[no-untyped-call]
    dist.barrier()  # the others wait until validation is done
    dist.destroy_process_group()


if __name__ == "__main__":
    from torch.multiprocessing.spawn import spawn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(run, args=(2, port), nprocs=2)  # type: ignore[no-untyped-call]
