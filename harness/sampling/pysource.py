"""The source of a Python frame's file, read safely: only a regular file of at most
SOURCE_LIMIT bytes, opened without blocking (a frame's file may be /dev/fd/63 or a FIFO now,
whose open or read would block), cached per version of the file (its mtime and size), so a
report read again later parses each file once. The stdlib's linecache would open any path
and read all of it.

Readers: the lock statements of detectors/threads.py, the init_process_group calls of
sampling/callranks.py.
"""

from __future__ import annotations

import ast
import functools
import os
import stat

SOURCE_LIMIT = 1 << 20  # bytes: a larger file is not read


def _version(path: str) -> tuple[int, int] | None:
    """(mtime, size) of a source file worth reading: a regular file (a frame's file may be
    /dev/fd/63 or a FIFO now, whose open or read would block) of at most SOURCE_LIMIT."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > SOURCE_LIMIT:
        return None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _source(path: str, version: tuple[int, int]) -> bytes | None:
    """The file's bytes (cached per version: a report is read again later), None when it is
    no longer a regular file within the limit. Opened without blocking and checked again on
    the open file: the path may have changed since the stat."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > SOURCE_LIMIT:
            return None
        chunks, size = [], 0
        while size <= SOURCE_LIMIT and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
        return None if size > SOURCE_LIMIT else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_tree(path: str) -> ast.Module | None:
    version = _version(path)
    return _parse(path, version) if version is not None else None


@functools.lru_cache(maxsize=64)
def _parse(path: str, version: tuple[int, int]) -> ast.Module | None:
    """The parsed source (cached per version of the file)."""
    data = _source(path, version)
    if data is None:
        return None
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def source_line(path: str, line: int) -> str:
    """Line `line` of a source file as written; "" when the file is not a regular one
    within the size limit, or has no such line (the stdlib's line cache would open any
    path, a FIFO too, and read all of it)."""
    version = _version(path) if path and line > 0 else None
    data = _source(path, version) if version is not None else None
    if data is None:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[line - 1] if line <= len(lines) else ""


def function_at(tree: ast.Module, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body holds `line`."""
    best: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno > best.lineno):
                best = node
    return best
