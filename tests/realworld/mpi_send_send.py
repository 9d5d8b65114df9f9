"""MPI: both ranks Send a large message before either Receives (an "unsafe" exchange).

Source: the MPI standard (4.1), section 3.5 "Semantics of Point-to-Point Communication":
an exchange in which both processes send first "is unsafe" and may deadlock once messages
exceed the system's buffering (https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report.pdf);
Gropp's MPI tutorial, "Buffering / unsafe" (https://www.mcs.anl.gov/research/projects/mpi/
tutorial/gropp/node87.html); mpi4py's tutorial exchanges the same way with Sendrecv.
Versions: CPython 3.11.7, mpi4py 4.1.2, MPICH 5.0.2 (the `mpich` wheel: mpiexec hydra).
Hang: a 32 MiB message goes by rendezvous; each rank's Send waits for the peer's matching
Recv, which never comes: both ranks poll MPICH's progress engine (CPU busy), no output
after "rank N: sending". mpiexec waits for both.
Run: mpiexec -n 2 python mpi_send_send.py
"""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
out = np.full(1 << 22, rank, dtype=np.float64)  # 32 MiB: far above the eager limit
got = np.empty_like(out)
print(f"rank {rank}: sending", flush=True)
comm.Send(out, dest=peer, tag=7)  # both ranks block here
comm.Recv(got, source=peer, tag=7)
print(f"rank {rank}: got {got[0]:.0f}", flush=True)
