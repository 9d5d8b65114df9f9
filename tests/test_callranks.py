"""A rank no launcher told, from its init_process_group call (harness/sampling/callranks.py):
pure tests over hand-made `py-spy dump --locals` frames and source files, and one real
process read by a real py-spy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.sampling import callranks
from harness.sampling.callranks import FrameLocals, evaluate, parse_locals, rank_in_frames
from harness.sampling.procfs import last_seen
from harness.sampling.sample import sample_tree
from tests import facts

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _expr(text: str) -> object:
    import ast

    node = ast.parse(text, mode="eval").body
    return evaluate(node, {"rank": "2", "node": "1", "n": "4", "name": '"x"', "t": "<Tensor>"})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("rank", 2),
        ("node * n + rank", 6),
        ("-rank", -2),
        ("n // rank % 3", 2),
        ("n // 0", None),  # never raises
        ("True", None),  # a bool is no rank
        ("name", None),
        ("t", None),
        ("args.rank", None),  # an object's attribute: not in py-spy's locals
        ("int(rank)", None),  # a call is not evaluated
        ("missing", None),
    ],
)
def test_an_argument_is_evaluated_over_the_frames_locals(text: str, value: int | None) -> None:
    assert _expr(text) == value


def test_py_spy_locals_are_parsed_per_thread_innermost_first() -> None:
    text = json.dumps(
        [
            {
                "pid": 10,
                "thread_id": 1,
                "os_thread_id": 10,
                "frames": [
                    {
                        "name": "barrier",
                        "filename": C10D,
                        "line": 5356,
                        "locals": [{"name": "async_op", "repr": "False", "arg": True}],
                    },
                    {"name": "<module>", "filename": "<string>", "line": 1, "locals": None},
                ],
            }
        ]
    )
    (thread,) = parse_locals(text)
    assert thread[0] == FrameLocals("barrier", C10D, 5356, {"async_op": "False"})
    assert thread[1].values == {}


def test_a_rank_at_the_rendezvous_is_read_from_the_calls_own_frame() -> None:
    frames = [
        FrameLocals("_create_c10d_store", C10D.replace("distributed_c10d", "rendezvous"), 199, {}),
        FrameLocals("init_process_group", C10D, 1892, {"rank": "1", "world_size": "3"}),
    ]
    r = rank_in_frames(7, frames)
    assert r is not None
    assert (r.pid, r.rank, r.world_size, r.launcher) == (7, 1, 3, "torch")
    assert r.source == "init_process_group(rank=1)"


def _program(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_rank_in_a_collective_is_read_from_the_call_in_its_function(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        """\
        import torch.distributed as dist

        def run(local, world, port, node):
            def helper():
                dist.init_process_group("gloo", rank=99)  # another function's call
            dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", None, world,
                                    node * 2 + local)
            dist.all_reduce(t)
        """,
    )
    values = {"local": "1", "world": "4", "port": "5000", "node": "1"}
    frames = [
        FrameLocals("all_reduce", C10D, 3252, {"rank": "0"}),  # not the init frame: skipped
        FrameLocals("run", path, 8, values),
    ]
    r = rank_in_frames(8, frames)
    assert r is not None
    assert (r.rank, r.world_size) == (3, 4)
    assert r.source == "init_process_group(rank=node * 2 + local) in run (train.py:6)"


def test_no_rank_where_the_call_does_not_say_one(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        """\
        import torch.distributed as dist

        def from_env():
            dist.init_process_group("gloo")  # rank -1: the environment's (sampling/ranks.py)
            dist.barrier()

        def from_args(args):
            dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
            dist.barrier()

        def elsewhere(rank):
            dist.barrier()
        """,
    )
    for function, line, values in [
        ("from_env", 5, {}),
        ("from_args", 9, {"args": "<Namespace at 0x7f>"}),
        ("elsewhere", 12, {"rank": "1"}),  # a local called rank is no call's argument
    ]:
        assert rank_in_frames(1, [FrameLocals(function, path, line, values)]) is None
    init = FrameLocals("init_process_group", C10D, 1892, {"rank": "-1", "world_size": "-1"})
    assert rank_in_frames(1, [init]) is None


# a stand-in for torch's module at its path (torch/distributed/*.py): the candidate rule and
# the init frame are matched by path; the wait is real (a read of a pipe nobody writes)
_FAKE_C10D = """\
import os

def init_process_group(backend, init_method=None, timeout=None, world_size=-1, rank=-1):
    r, w = os.pipe()
    print("waiting", flush=True)
    os.read(r, 1)
"""
_RANK = """\
import sys
sys.path.insert(0, sys.argv[1])
from torch.distributed import distributed_c10d as dist

def run(local_rank, world):
    dist.init_process_group("gloo", "tcp://127.0.0.1:1", None, world, local_rank)

run(int(sys.argv[2]), 2)
"""


def test_a_real_rank_is_read_by_py_spy_from_its_init_call(tmp_path: Path) -> None:
    facts.require_tool("py-spy", why="the locals are read by py-spy")
    pkg = tmp_path / "lib" / "torch" / "distributed"
    pkg.mkdir(parents=True)
    for d in (pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "distributed_c10d.py").write_text(_FAKE_C10D)
    (tmp_path / "rank.py").write_text(_RANK)
    argv = [sys.executable, str(tmp_path / "rank.py"), str(tmp_path / "lib"), "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "waiting\n"
        deadline = time.monotonic() + 30
        while "pipe_read" not in _wchan(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        s = sample_tree(proc.pid, snapshots=1, native="none", stack_timeout=20)
    finally:
        proc.kill()
        proc.wait()
    ranks = [(r.pid, r.rank, r.world_size, r.source) for r in s.ranks]
    assert ranks == [(proc.pid, 1, 2, "init_process_group(rank=1)")], s.notes
    # a process with a rank already (its environment) is not dumped again
    assert callranks.candidates(last_seen(s.snapshots), s) == []


def _wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""
