"""An unsafe MPI exchange: both ranks `Send` a large message to each other before either
posts its `Recv`. A send larger than the eager limit waits for the matching receive (the
rendezvous protocol), so neither returns: the "unsafe" exchange of Gropp's MPI tutorial
(Argonne, "Sources of Deadlocks": "Send works for small enough messages but fails when
messages get too large", http://www-unix.mcs.anl.gov/mpi/tutorial/gropp/node87.html) and of
the MPI standard's section on point-to-point semantics (a program that relies on buffering
is unsafe). MPICH 5.0.2 (the `mpich` wheel) busy-polls in
its progress engine, so both ranks spin at 100% of a core. mpi4py 4.1.2, Python 3.11.

Run as `mpiexec -n 2 python dist_mpi_sendsend.py`.
"""

import numpy as np
from mpi4py import MPI

COUNT = 1 << 20  # 8 MiB of float64: far over any eager limit

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
outgoing = np.full(COUNT, rank, dtype=np.float64)
incoming = np.empty(COUNT, dtype=np.float64)
print(f"rank {rank}: exchanging with rank {peer}", flush=True)
comm.Send(outgoing, dest=peer, tag=7)  # both ranks block here
comm.Recv(incoming, source=peer, tag=7)
print(f"rank {rank}: done", flush=True)
