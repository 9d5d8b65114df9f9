"""HEALTHY look-alike of wg_tcp_both_recv.py: an idle one-shot server whose client connects
8 s late; the server speaks first, as its protocol says.

Source: the socket HOWTO (https://docs.python.org/3/howto/sockets.html); the
server-speaks-first convention (a banner) that wg_tcp_both_recv.py breaks.
Versions: CPython 3.11.7, stdlib socket and multiprocessing (fork, Linux).
Looks like a hang: for 8 s the server waits in accept() on a listening loopback socket and
the client process sleeps; no CPU, no output.
Ends: the client connects, reads the banner, sends its command; exit 0.
Run: python ok_wg_tcp_late_client.py
"""

import multiprocessing as mp
import socket
import time


def late_client(port: int) -> None:
    time.sleep(8)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        banner = sock.recv(1024)
        sock.sendall(b"HELO client")
        print("client got", banner, sock.recv(1024), flush=True)


if __name__ == "__main__":
    listener = socket.create_server(("127.0.0.1", 0))
    client = mp.Process(target=late_client, args=(listener.getsockname()[1],))
    client.start()
    print("running", flush=True)
    conn, _ = listener.accept()
    listener.close()
    with conn:
        conn.sendall(b"220 ready")  # the server speaks first
        conn.sendall(b"250 " + conn.recv(1024))
    client.join()
    print("exit", client.exitcode, flush=True)
