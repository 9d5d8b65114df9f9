"""torch: an intra-op (OpenMP) parallel op in the parent, then the same in a fork()ed child.

Source: pytorch/pytorch#17199 "Deadlock with multiprocessing (using fork) and unittest"
(https://github.com/pytorch/pytorch/issues/17199) and pytorch/pytorch#41197 "PyTorch should
warn when using multiprocessing fork after OpenMP has been initialized".
Versions: CPython 3.11.7, torch 2.13.0+cpu (its wheel ships torch/lib/libgomp.so.1);
torch.set_num_threads(4) so the parent's team has more than one thread on any host.
Hang: the child's first parallel op enters libgomp (GOMP_parallel ->
gomp_team_barrier_wait_end) and waits for a team that did not survive the fork; the parent
waits in Process.join. No output after "parent".
Run: python torch_omp_fork.py
"""

import multiprocessing as mp

import torch


def work() -> None:
    x = torch.ones((64, 512, 512))
    print(float(torch.einsum("ijl,ikl->ijk", x, x).sum()), flush=True)


if __name__ == "__main__":
    torch.set_num_threads(4)
    print("parent", flush=True)
    work()
    p = mp.get_context("fork").Process(target=work)
    p.start()
    p.join()
    print("child exit", p.exitcode, flush=True)
