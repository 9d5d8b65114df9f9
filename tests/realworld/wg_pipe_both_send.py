"""Parent and worker both send a large message over a multiprocessing.Pipe() before either
reads: both block with full socket buffers.

Source: mdavis-xyz/lambda_multiprocessing#17 ("Pipe.send occasionally hangs when submitting
a large job to child process": the parent's send of job 2 fills the pipe while the child's
send of the result of job 1 waits for room; "Parent and child both hang"); python/cpython#116059
("Mention that multiprocessing.connection.Connection.send (and friends) can block").
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux); Pipe() is duplex, a
socketpair(AF_UNIX, SOCK_STREAM) of about 200 KiB of buffer each way.
Hang: the worker sends its 16 MiB result before reading its job, the parent sends its
16 MiB job before reading the result: both block in write() on their end of the socketpair,
each waiting for the other to read. No CPU, no output after "running".
Run: python wg_pipe_both_send.py
"""

import multiprocessing as mp
from multiprocessing.connection import Connection

PAYLOAD = b"x" * (16 << 20)


def worker(conn: Connection) -> None:
    conn.send_bytes(PAYLOAD)  # the previous job's result, sent before reading the next job
    job = conn.recv_bytes()
    conn.send_bytes(job[:10])


if __name__ == "__main__":
    here, there = mp.Pipe()
    p = mp.Process(target=worker, args=(there,))
    p.start()
    there.close()
    print("running", flush=True)
    here.send_bytes(PAYLOAD)  # the next job, sent before reading the result
    result = here.recv_bytes()
    p.join()
    print(len(result), flush=True)
