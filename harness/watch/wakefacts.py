"""The kernel's own answers to "who could end this wait", beyond pipes (docs/quiescence.md,
the wake graph): the peer of a unix socket (sock_diag's UNIX_DIAG_PEER), the holders of a
file lock (/proc/locks), which eventfd or pidfd an fd is (fdinfo), whether a timerfd is
armed, and which file a shared futex lives in (/proc/PID/maps). Read only for the waits
that need them; every read is bounded and never raises (a fact that cannot be read is
absent, and its wait stays "outside / unknown").
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from dataclasses import dataclass

from harness.sampling import procfs

# ---------------------------------------------------------------- unix sockets (sock_diag)

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_UDIAG_SHOW_NAME, _UDIAG_SHOW_PEER = 0x1, 0x4
_UNIX_DIAG_NAME, _UNIX_DIAG_PEER = 0, 2
UNIX_LISTEN = 10  # TCP_LISTEN, as sock_diag reports a listening unix socket's state
SOCK_DGRAM = 2
_MAX_DIAG_BYTES = 1 << 24  # a host with more unix sockets than this is not read whole
_DIAG_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class UnixSocket:
    """One unix socket as sock_diag sees it."""

    inode: int
    type: int  # SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5
    state: int  # 1 connected (or unconnected dgram), 10 listening, 7 closed
    peer: int  # the peer socket's inode, 0 for none
    named: bool  # bound to a path or an abstract name: reachable by address


def _attrs(data: bytes, start: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            break
        out[kind] = data[start + 4 : start + length]
        start += (length + 3) & ~3
    return out


def parse_unix_diag(data: bytes) -> tuple[dict[int, UnixSocket], bool]:
    """The sockets in a buffer of netlink messages, and whether the dump is done."""
    found: dict[int, UnixSocket] = {}
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16 or off + length > len(data):
            return found, True  # malformed: stop, keep what was read
        if kind in (_NLMSG_DONE, _NLMSG_ERROR):
            return found, True
        if kind == SOCK_DIAG_BY_FAMILY and length >= 32:
            _, type_, state, _, inode = struct.unpack_from("=BBBBI", data, off + 16)
            attrs = _attrs(data, off + 32, off + length)
            peer_raw = attrs.get(_UNIX_DIAG_PEER, b"")
            peer = struct.unpack("=I", peer_raw[:4])[0] if len(peer_raw) >= 4 else 0
            found[inode] = UnixSocket(inode, type_, state, peer, bool(attrs.get(_UNIX_DIAG_NAME)))
        off += (length + 3) & ~3
    return found, False


def unix_sockets() -> dict[int, UnixSocket] | None:
    """Every unix socket of this network namespace by inode; None when sock_diag cannot be
    asked (no netlink, no unix_diag module, a timeout)."""
    show = _UDIAG_SHOW_NAME | _UDIAG_SHOW_PEER
    # unix_diag_req: family, protocol, pad, every state, any inode, what to show, no cookie
    req = struct.pack(
        "=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, show, ~0 & 0xFFFFFFFF, ~0 & 0xFFFFFFFF
    )
    flags = _NLM_F_REQUEST | _NLM_F_DUMP
    header = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, flags, 1, 0)
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    found: dict[int, UnixSocket] = {}
    try:
        sock.settimeout(_DIAG_TIMEOUT_S)
        sock.sendto(header + req, (0, 0))
        total = 0
        while total < _MAX_DIAG_BYTES:
            data = sock.recv(1 << 16)
            if not data:
                break
            total += len(data)
            part, done = parse_unix_diag(data)
            found.update(part)
            if done:
                return found
        return None  # cut short: not the whole table
    except OSError:
        return None
    finally:
        sock.close()


# ---------------------------------------------------------------- file locks (/proc/locks)


@dataclass(frozen=True)
class FileLock:
    """One line of /proc/locks: a lock held (or, `blocked`, waited for) on a file."""

    kind: str  # "FLOCK", "POSIX", "OFDLCK", "LEASE"
    mode: str  # "READ" | "WRITE"
    pid: int  # who took it (-1 for an OFD lock)
    dev: str  # "MAJ:MIN" in hex, as /proc/locks writes it
    inode: int
    blocked: bool


def parse_locks(text: str) -> list[FileLock]:
    """/proc/locks: `1: FLOCK  ADVISORY  WRITE 3834 fe:00:2146849 0 EOF`; a waiter's line
    starts `1: -> FLOCK …`."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 6:
            continue
        blocked = words[1] == "->"
        words = words[2:] if blocked else words[1:]
        if len(words) < 5:
            continue
        kind, _, mode, pid, where = words[:5]
        parts = where.split(":")
        if len(parts) != 3 or not parts[2].isdigit():
            continue
        try:
            owner = int(pid)
        except ValueError:
            continue
        out.append(FileLock(kind, mode, owner, f"{parts[0]}:{parts[1]}", int(parts[2]), blocked))
    return out


def read_locks() -> list[FileLock] | None:
    text = procfs.read_proc("/proc/locks", 1 << 22)
    return None if text is None else parse_locks(text)


def dev_words(st_dev: int) -> str:
    """A device number as /proc/locks and /proc/PID/maps write it: "fe:00"."""
    return f"{os.major(st_dev):02x}:{os.minor(st_dev):02x}"


@dataclass(frozen=True)
class FdFile:
    """What an fd is, by its inode: a FIFO, a regular file, a socket, ..."""

    dev: str
    inode: int
    fifo: bool


def fd_file(pid: int, fd: int) -> FdFile | None:
    try:
        st = os.stat(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    return FdFile(dev_words(st.st_dev), st.st_ino, stat.S_ISFIFO(st.st_mode))


# ---------------------------------------------------------------- fdinfo: eventfd, pidfd, timerfd


def fdinfo(pid: int, fd: int) -> dict[str, str]:
    text = procfs.read_proc(f"/proc/{pid}/fdinfo/{fd}", 1 << 16) or ""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key not in out:
            out[key.strip()] = value.strip()
    return out


def eventfd_id(pid: int, fd: int) -> int | None:
    """An eventfd's identity (fdinfo `eventfd-id`, Linux 6.1+): the same object in every
    process that holds it; None on older kernels (its wait stays outside)."""
    value = fdinfo(pid, fd).get("eventfd-id", "")
    return int(value) if value.isdigit() else None


def pidfd_pid(pid: int, fd: int) -> int | None:
    """The process a pidfd refers to (fdinfo `Pid`; -1 once it has exited)."""
    value = fdinfo(pid, fd).get("Pid", "")
    try:
        return int(value)
    except ValueError:
        return None


def timerfd_armed(pid: int, fd: int) -> bool | None:
    """A timerfd will fire (fdinfo `it_value` not zero); None when unreadable."""
    value = fdinfo(pid, fd).get("it_value")
    if value is None:
        return None
    return value.replace(" ", "") not in ("(0,0)", "")


# ---------------------------------------------------------------- shared futexes (/proc/PID/maps)


@dataclass(frozen=True)
class Mapping:
    """The mapping an address lies in: shared ("s") or private, and the file behind it."""

    shared: bool
    dev: str
    inode: int
    path: str


class Maps:
    """One process's /proc/PID/maps, parsed once: the mapping an address lies in, and the
    files and segments it maps shared (a look reads each process's maps once, however many
    of its threads wait on futexes)."""

    def __init__(self, text: str) -> None:
        self._rows: list[tuple[int, int, Mapping]] = []
        for line in text.splitlines():
            words = line.split(maxsplit=5)
            if len(words) < 5:
                continue
            lo, _, hi = words[0].partition("-")
            try:
                row = (int(lo, 16), int(hi, 16), int(words[4]))
            except ValueError:
                continue
            path = words[5].strip() if len(words) > 5 else ""
            self._rows.append(
                (row[0], row[1], Mapping(words[1][3:4] == "s", words[3], row[2], path))
            )

    def at(self, address: int) -> Mapping | None:
        return next((m for lo, hi, m in self._rows if lo <= address < hi), None)

    def shared(self) -> set[tuple[str, int]]:
        """The (dev, inode) of every file or segment mapped shared."""
        return {(m.dev, m.inode) for _, _, m in self._rows if m.shared and m.inode}


def read_maps(pid: int) -> Maps | None:
    text = procfs.read_proc(f"/proc/{pid}/maps", 1 << 24)
    return None if text is None else Maps(text)


def maps_denied(pid: int) -> bool:
    """Reading `pid`'s maps is refused (EACCES, EPERM), as opposed to the process being gone
    or exiting (a churning host's processes vanish between a listing and a read)."""
    try:
        os.close(os.open(f"/proc/{pid}/maps", os.O_RDONLY))
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EPERM)
    return False


def mapping_of(pid: int, address: int) -> Mapping | None:
    found = read_maps(pid)
    return found.at(address) if found is not None else None


def shared_pages(pid: int) -> set[tuple[str, int]]:
    """The (dev, inode) of every file or segment `pid` maps shared (empty when unreadable:
    a process whose maps cannot be read is not counted as a mapper)."""
    found = read_maps(pid)
    return found.shared() if found is not None else set()


def process_gone(pid: int) -> bool:
    """No process or thread `pid` exists any more (a mutex owner, a lock's holder)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError as exc:
        return exc.errno == errno.ESRCH
    return False
