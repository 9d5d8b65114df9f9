"""Healthy look-alike of dist_mpi_sendsend.py: the same large exchange, done safely with
`Sendrecv` (MPI posts the receive with the send), many rounds with compute between them,
then a barrier. MPICH 5.0.2, mpi4py 4.1.2. Run as `mpiexec -n 2 python
dist_mpi_sendrecv.py`; `ROUNDS` in the environment sets the rounds (default 20).
"""

import os
import time

import numpy as np
from mpi4py import MPI

COUNT = 1 << 20

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
outgoing = np.full(COUNT, rank, dtype=np.float64)
incoming = np.empty(COUNT, dtype=np.float64)
for step in range(int(os.environ.get("ROUNDS", "20"))):
    comm.Sendrecv(outgoing, dest=peer, sendtag=7, recvbuf=incoming, source=peer, recvtag=7)
    assert incoming[0] == peer
    time.sleep(0.05 * (1 + rank))  # rank 1 is slower: rank 0 waits in Sendrecv meanwhile
    if step % 5 == 0:
        print(f"rank {rank}: round {step}", flush=True)
comm.Barrier()
print(f"rank {rank}: done", flush=True)
