"""Detectors over the ranks of a torch.distributed job: ranks in different collectives
(`collective-mismatch`), a rank that is not in the collective the others wait in
(`missing-rank`), and the timeout lines gloo and NCCL print (`collective-timeout`).

A rank is a process with RANK (torchrun, torch.distributed's launchers) in its environment,
read by the sampler (sampling/ranks.py), `--rank N` on its command line, or the `rank` it
gave its init_process_group call (sampling/callranks.py: torch.multiprocessing.spawn's
ranks). Its collective is the outermost frame of its Python stack in
torch/distributed/distributed_c10d.py (the call the program made: `all_reduce`,
`broadcast`, `barrier`, `send` …); its line is the innermost frame of its own code. Each
finding is one match with a per-rank table as its evidence, never one per rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.views import processes, top
from harness.config.causes import NoParams
from harness.sampling.model import ProcessSample, SampleSet, ThreadStack, spinning
from harness.sampling.ranks import ProcessRank, rank_from_argv
from harness.vocab import EventKind, Need

# CPU share between looks above which a rank counts as working (a blocked thread uses ~0)
ACTIVE_FRACTION = 0.05
_C10D = re.compile(r"torch/distributed/distributed_c10d\.py$")
# torch modules that call collectives through the bindings, not through distributed_c10d,
# and the words of a function that makes one
_WRAPPERS = re.compile(r"torch/nn/parallel/distributed\.py$|torch/distributed/.*\.py$")
_VERB = re.compile(r"broadcast|all_?reduce|all_?gather|reduce_?scatter|barrier|all_to_all")


@dataclass(frozen=True)
class RankRow:
    rank: int
    pid: int
    collective: str  # the c10d call it is in; "" when in none
    line: str  # its own innermost frame, or where it is when in no collective
    seq: str = ""  # the sequence number a timeout line gave, "" unknown
    busy: bool = False  # its main thread kept a core busy (the "(busy)" of the table)
    # it ran at some look or used CPU between looks: the stack is one instant, the CPU a
    # window, and a rank that waited most of the window may be computing at the last look
    active: bool = False


def recorded_ranks(s: SampleSet) -> list[ProcessRank]:
    """The ranks the sampler read from each process's environment, then those its command
    line gives (a saved report of an older harness has only these)."""
    # getattr: `SampleSet.ranks` is filled by the sampler (sampling/ranks.read_ranks)
    found: dict[int, ProcessRank] = {r.pid: r for r in getattr(s, "ranks", [])}
    for p in processes(s).values():
        if p.pid not in found and (r := rank_from_argv(p.pid, p.cmdline)) is not None:
            found[p.pid] = r
    return list(found.values())


def _rank_processes(s: SampleSet, launcher: str) -> dict[int, tuple[ProcessRank, ProcessSample]]:
    """rank → (its rank record, its process): one process per rank, the outermost of those
    that claim it (a rank's own children, a DataLoader worker, inherit its environment)."""
    procs = processes(s)
    claims = [(r, procs[r.pid]) for r in recorded_ranks(s) if r.pid in procs]
    claims = [(r, p) for r, p in claims if r.launcher == launcher]
    by_pid = {p.pid: r.rank for r, p in claims}
    out: dict[int, tuple[ProcessRank, ProcessSample]] = {}
    for r, p in sorted(claims, key=lambda c: c[1].pid):
        if by_pid.get(p.ppid) != r.rank and r.rank not in out:
            out[r.rank] = (r, p)
    return out


def _collective(stacks: Sequence[ThreadStack]) -> tuple[str, ThreadStack | None]:
    """The c10d call a process is in (its outermost distributed_c10d.py frame), or the
    collective a torch wrapper makes through the C++ bindings directly (DDP's forward
    broadcasting its buffers: `_distributed_broadcast_coalesced` in
    torch/nn/parallel/distributed.py, innermost first), and the stack it is in; ("", main
    thread's stack) when in none."""
    for st in stacks:
        calls = [f.function for f in st.frames if f.file and _C10D.search(f.file)]
        if calls:
            return calls[-1].rsplit(".", 1)[-1], st
    for st in stacks:
        wrapped = [
            f.function.rsplit(".", 1)[-1]
            for f in st.frames
            if f.file and _WRAPPERS.search(f.file) and _VERB.search(f.function)
        ]
        if wrapped:
            return wrapped[0], st
    main = next((st for st in stacks if st.tid == st.pid), stacks[0] if stacks else None)
    return "", main


def rank_table(s: SampleSet, tail: Sequence[str] = ()) -> tuple[list[RankRow], int | None]:
    """Each torch rank's row, in rank order, and the world size its launcher gave."""
    ranks = _rank_processes(s, "torch")
    timed_out = {t.rank: t for t in timeouts(tail)}
    rows: list[RankRow] = []
    for rank, (_, p) in sorted(ranks.items()):
        py = [st for st in s.stacks if st.pid == p.pid and st.python]
        collective, st = _collective(py)
        line = top(st.frames) if st is not None else "no Python stack"
        seq = timed_out[rank].seq if rank in timed_out else ""
        act = next((a for a in s.activity if a.tid == (st.tid if st else p.pid)), None)
        busy = act is not None and spinning(act.states, act.cpu_fraction)
        active = act is not None and ("R" in act.states or act.cpu_fraction >= ACTIVE_FRACTION)
        rows.append(RankRow(rank, p.pid, collective, line, seq, busy, busy or active))
    sizes = {r.world_size for r, _ in ranks.values() if r.world_size}
    return rows, max(sizes) if sizes else None


def table(rows: Sequence[RankRow]) -> list[str]:
    """The per-rank table, as evidence lines."""
    lines = ["rank | pid | collective | Python line"]
    for r in rows:
        what = r.collective + (f" (SeqNum {r.seq})" if r.seq else "") if r.collective else "-"
        what += " (busy)" if r.busy else ""
        lines.append(f"{r.rank} | {r.pid} | {what} | {r.line}")
    return lines


def _names(rows: Sequence[RankRow]) -> str:
    return ", ".join(f"rank {r.rank} (pid {r.pid}) in {r.collective} at {r.line}" for r in rows)


@detector("collective-mismatch", fields=("ranks", "collectives", "table"))
def collective_mismatch(seen: Inputs, params: NoParams) -> list[Match]:
    """Ranks waiting in different collectives, or in the same one at different sequence
    numbers (where a timeout line gave them). The same collective called from different
    lines is no mismatch: `if rank == 0: all_reduce(a) else: all_reduce(b)` is one
    collective, legitimately."""
    rows, _ = rank_table(seen.samples, seen.output_tail)
    inside = [r for r in rows if r.collective]
    kinds = sorted({r.collective for r in inside})
    seqs = {r.seq for r in inside if r.seq}
    if len(inside) < 2 or (len(kinds) < 2 and len(seqs) < 2):
        return []
    if len(kinds) > 1:
        what = "different collectives: " + " vs ".join(kinds)
    else:
        what = f"{kinds[0]} at different sequence numbers: {', '.join(sorted(seqs))}"
    return [
        match(table(rows), ranks=_names(inside), collectives=what, table="; ".join(table(rows)))
    ]


@detector("missing-rank", fields=("missing", "waiting", "world", "table"))
def missing_rank(seen: Inputs, params: NoParams) -> list[Match]:
    """Ranks waiting in a collective while another rank of the job is blocked in none, or
    is not among the live processes (exited, never started). A rank computing outside the
    collectives is not missing (it may still join: the spin verdict locates a loop)."""
    rows, world = rank_table(seen.samples, seen.output_tail)
    inside = [r for r in rows if r.collective]
    if not inside:
        return []
    absent = sorted(set(range(world or 0)) - {r.rank for r in rows})
    # a rank computing outside the collectives may still join: only a blocked one is missing
    outside = [r for r in rows if not r.collective and not r.active]
    missing = [f"rank {r.rank} (pid {r.pid}) is in no collective: {r.line}" for r in outside]
    missing += [
        f"rank {n} is not among the live processes (exited or never started)" for n in absent
    ]
    if not missing:
        return []
    gone = [
        f"pid {e.pid} ({e.name}) {e.status or 'exited'} at t={e.t:.1f}s"
        for e in seen.samples.events
        if e.event is EventKind.EXIT
    ]
    evidence = [*table(rows), *missing, *gone[:4]]
    return [
        match(
            evidence,
            missing="; ".join(missing),
            waiting=_names(inside),
            world=world if world is not None else "?",
            table="; ".join(table(rows)),
        )
    ]


# ---------------------------------------------------------------- the output's timeout lines


@dataclass(frozen=True)
class Timeout:
    rank: int
    op: str  # ALLREDUCE, BROADCAST … (NCCL's OpType), or the c10d call (gloo's traceback)
    seq: str  # NCCL's SeqNum, "" when not printed
    line: str


# [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078,
# OpType=ALLREDUCE, NumelIn=…, Timeout(ms)=600000) ran for 600013 milliseconds …
_NCCL = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
)
# [rank0]:   File ".../torch/distributed/distributed_c10d.py", line 3252, in all_reduce
_GLOO_FRAME = re.compile(
    r"^\[rank(?P<rank>\d+)\]:\s+File \"[^\"]*distributed_c10d\.py\", line \d+, in (?P<call>\w+)"
)
# [rank0]: RuntimeError: [.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting
# 5000ms for recv operation to complete
_GLOO_TIMEOUT = re.compile(r"^\[rank(?P<rank>\d+)\]:.*Timed out waiting \d+ms for \w+ operation")
# Detected mismatch between collectives on ranks. Rank 1 is running collective:
# CollectiveFingerPrint(SequenceNumber=21, OpType=BROADCAST, …), but Rank 0 is running …
_FINGERPRINT = re.compile(
    r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\("
    r"(?:SequenceNumber=(?P<seq>\d+),?\s*)?OpType=(?P<op>\w+)"
)


def timeouts(tail: Sequence[str]) -> list[Timeout]:
    """Each rank's timeout (or fingerprint) line in the output, the last one per rank."""
    found: dict[int, Timeout] = {}
    call: dict[int, str] = {}
    for text in tail:
        if m := _GLOO_FRAME.search(text):
            call[int(m["rank"])] = m["call"]
        elif m := _GLOO_TIMEOUT.search(text):
            rank = int(m["rank"])
            found[rank] = Timeout(rank, call.get(rank, "?"), "", text.strip())
        for m in [*_NCCL.finditer(text), *_FINGERPRINT.finditer(text)]:
            rank = int(m["rank"])
            found[rank] = Timeout(rank, m["op"], m["seq"] or "", text.strip()[:300])
    return [found[r] for r in sorted(found)]


@detector("collective-timeout", needs=(Need.OUTPUT,), fields=("ranks", "finding"))
def collective_timeout(seen: Inputs, params: NoParams) -> list[Match]:
    """The ranks that printed a gloo/NCCL collective timeout (or a collective fingerprint
    mismatch): in different collectives or sequence numbers, or all in the same one (then
    a rank that printed none never joined, or failed otherwise first)."""
    found = timeouts(seen.output_tail)
    if not found:
        return []
    ops = sorted({t.op for t in found})
    seqs = sorted({t.seq for t in found if t.seq})
    if len(ops) > 1:
        finding = "ranks in different collectives: " + " vs ".join(ops)
    elif len(seqs) > 1:
        finding = f"ranks in {ops[0]} at different sequence numbers: {', '.join(seqs)}"
    else:
        at = f" (SeqNum {seqs[0]})" if seqs else ""
        # a rank that printed no timeout line may never have joined the collective, or may
        # have failed otherwise first (a peer's exit closes gloo's connections): not known
        finding = (
            f"every rank that reported waits in the same {ops[0]}{at}: a rank that "
            "reported no timeout either never joined it or failed otherwise first"
        )
    ranks = ", ".join(f"rank {t.rank} in {t.op}" + (f" #{t.seq}" if t.seq else "") for t in found)
    return [match([t.line for t in found], ranks=ranks, finding=finding)]
