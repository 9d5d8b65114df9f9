"""A client and a one-shot server on a loopback TCP connection both recv() first: the
client waits for the server's banner, the server for the client's command.

Source: Lewis Van Winkle, Hands-On Network Programming with C (Packt/O'Reilly), "Deadlocks":
"A trivial example of a deadlock is if both the client and server call recv() immediately
after the connection is established. In that case, both sides wait forever for data that is
never going to come." (https://www.oreilly.com/library/view/hands-on-network-programming/
9781789349863/5e4d5ef9-d314-4aeb-8915-14b6cc38a78f.xhtml); the socket HOWTO on protocol
design (https://docs.python.org/3/howto/sockets.html#using-a-socket).
Versions: CPython 3.11.7, stdlib socket and multiprocessing (fork, Linux).
Hang: the server (a child process) accepts one connection, closes its listening socket and
waits in recv for a command; the client (the parent) waits in recv for a banner (the
server-speaks-first convention of SMTP or FTP). Nothing listens any more: only the two
ends of the connection, both in the tree, could wake each other. No CPU, no output after
"running".
Run: python wg_tcp_both_recv.py
"""

import multiprocessing as mp
import socket


def serve(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    listener.close()  # a one-shot server: no new connection can come
    with conn:
        command = conn.recv(1024)  # waits for the client to speak first
        conn.sendall(b"250 " + command)


if __name__ == "__main__":
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = mp.Process(target=serve, args=(listener,), name="server")
    server.start()
    listener.close()  # the server's copy is the only one
    with socket.create_connection(("127.0.0.1", port)) as sock:
        print("running", flush=True)
        banner = sock.recv(1024)  # waits for the server to speak first
        sock.sendall(b"HELO client")
    server.join()
    print(banner, flush=True)
