"""torch.distributed (gloo) under torch.multiprocessing.spawn: fewer processes spawned than
the world size; init never returns.

Source: helboukkouri/character-bert-pretraining#4 "Training script hangs at
torch.Distributed.init_process_group"
(https://github.com/helboukkouri/character-bert-pretraining/issues/4), with the answer it
quotes: "It will hang unless you pass in nprocs=world_size to mp.spawn(). In other words,
it's waiting for the 'whole world' to show up"; pytorch/pytorch#49846 (the same, one rank of
two started by hand).
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend (default timeout 30 min).
Hang: world_size is 3 but mp.spawn starts 2 processes; ranks 0 and 1 wait in
init_process_group for rank 2 at the TCPStore rank 0 hosts. The ranks are told their rank
as an argument of spawn's function and pass it to init_process_group (no RANK or WORLD_SIZE
in their environment). Output stops after "rank N: init".
Run: python gloo_spawn_missing_rank.py
"""

import socket


def run(local_rank: int, world_size: int, port: int) -> None:
    import torch.distributed as dist

    print(f"rank {local_rank}: init", flush=True)
    dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", None, world_size, local_rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from torch.multiprocessing.spawn import spawn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gpus = 2  # the processes this host starts; the world was meant to be three
    spawn(run, args=(3, port), nprocs=gpus)  # type: ignore[no-untyped-call]
