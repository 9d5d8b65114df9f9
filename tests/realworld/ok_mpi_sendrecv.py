"""HEALTHY look-alike of mpi_send_send.py: the same exchange with Sendrecv.

Source: the MPI standard (4.1), section 3.10 "Send-Receive": MPI_SENDRECV executes a
blocking send and receive without the deadlock of two blocking sends
(https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report.pdf); mpi4py's Comm.Sendrecv.
Versions: CPython 3.11.7, mpi4py 4.1.2, MPICH 5.0.2 (the `mpich` wheel).
Looks like a hang: rank 1 sleeps about 7 s before its exchange (a slow load), while rank 0
waits in Sendrecv polling MPICH's progress engine, silent.
Ends: exit 0 after both ranks print what they got.
Run: mpiexec -n 2 python ok_mpi_sendrecv.py
"""

import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
out = np.full(1 << 22, rank, dtype=np.float64)
got = np.empty_like(out)
print(f"rank {rank}: exchanging", flush=True)
if rank == 1:
    time.sleep(7)
comm.Sendrecv(out, dest=peer, sendtag=7, recvbuf=got, source=peer, recvtag=7)
print(f"rank {rank}: got {got[0]:.0f}", flush=True)
