"""report.html's merged stack tree: the threads' stacks merged from the outermost frame
inwards, identical prefixes once (as STAT's merged stack trees), each frame with the number
of threads through it, the located frame marked. A run of frames shared by the same threads
is one block; a fork indents. Native and Python stacks are two trees."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.analysis.classify import Verdict
from harness.sampling.model import Frame, SampleSet, ThreadActivity, ThreadStack
from harness.text import html_text as escape


def frame_label(frame: Frame) -> tuple[str, str]:
    """A frame's function and where it is, as the verdict's `location_frames` spell it."""
    where = (frame.file or frame.module or "").rsplit("/", 1)[-1]
    if where and frame.line:
        where = f"{where}:{frame.line}"
    return frame.function, where


@dataclass
class Node:
    function: str
    where: str
    own: bool
    inline: bool = False  # inlined into the frame above it (no call of its own)
    threads: list[ThreadStack] = field(default_factory=list)
    children: dict[tuple[str, str], Node] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.function} ({self.where})" if self.where else self.function


def merge(stacks: list[ThreadStack]) -> Node:
    """One tree for `stacks`: the root stands for all of them; children outermost first."""
    root = Node("", "", False, threads=list(stacks))
    for st in stacks:
        node = root
        for frame in reversed(st.frames):  # outermost first
            function, where = frame_label(frame)
            key = (function, where)
            child = node.children.get(key)
            if child is None:
                inline = bool(getattr(frame, "inline", False))
                child = node.children[key] = Node(function, where, frame.own, inline)
            child.threads.append(st)
            node = child
    return root


def _per_thread(stacks: list[ThreadStack], python: bool) -> list[ThreadStack]:
    """One stack per thread of the kind asked for (the first a tool produced)."""
    chosen: dict[tuple[int, int], ThreadStack] = {}
    for st in stacks:
        if st.python == python and st.frames:
            chosen.setdefault((st.pid, st.tid), st)
    return list(chosen.values())


def _thread_text(st: ThreadStack, activity: dict[tuple[int, int], ThreadActivity]) -> str:
    a = activity.get((st.pid, st.tid))
    text = f"pid {st.pid} tid {st.tid} '{st.name}'"
    if a is not None:
        states = ",".join(a.states) or "?"
        cpu = f"{a.cpu_fraction:.0%}" if isinstance(a.cpu_fraction, int | float) else "?"
        text += f" {states} cpu {cpu}" + (f" {a.wchan}" if a.wchan else "")
    return text


class _Writer:
    def __init__(self, verdict: Verdict | None, activity: dict[tuple[int, int], ThreadActivity]):
        located = verdict.location_frames[0] if verdict and verdict.location_frames else None
        self.located_text = located
        self.located_function = verdict.location if verdict else None
        self.activity = activity
        self.out: list[str] = []

    def is_located(self, node: Node) -> bool:
        if self.located_text is not None:
            return node.text == self.located_text
        return bool(self.located_function) and node.function == self.located_function

    def frame(self, node: Node, tag: str = "div") -> str:
        cls = "fr own" if node.own else "fr"
        mark = ""
        if self.is_located(node):
            cls += " located"
            mark = ' <span class="mark">◀ location</span>'
        n = len(node.threads)
        plural = "thread" if n == 1 else "threads"
        where = f' <span class="at">{escape(node.where)}</span>' if node.where else ""
        if node.inline:
            where += ' <span class="inl" title="inlined into the frame above">inlined</span>'
        return (
            f'<{tag} class="{cls}" data-count="{n}"><span class="n" title="{n} {plural}">'
            f'{n}</span> <span class="fn">{escape(node.function)}</span>{where}{mark}</{tag}>'
        )

    def threads(self, node: Node) -> None:
        n = len(node.threads)
        lines = "".join(
            f"<li>{escape(_thread_text(st, self.activity))}</li>" for st in node.threads
        )
        tids = ", ".join(str(st.tid) for st in node.threads[:8])
        more = f", … {n - 8} more" if n > 8 else ""
        self.out.append(
            f'<details class="who"><summary>{n} thread{"" if n == 1 else "s"} stop here: '
            f"tid {escape(tids)}{more}</summary><ul>{lines}</ul></details>"
        )

    def node(self, node: Node) -> None:
        """A block: this frame and the frames below it that the same threads share, then the
        threads that end here, then one nested block per fork."""
        chain = [node]
        while len(chain[-1].children) == 1:
            (only,) = chain[-1].children.values()
            if len(only.threads) != len(node.threads):
                break
            chain.append(only)
        self.out.append(f'<details open class="blk"><summary>{self.frame(chain[0], "span")}')
        self.out.append("</summary>")
        self.out += [self.frame(c) for c in chain[1:]]
        last = chain[-1]
        ended = len(last.threads) - sum(len(c.threads) for c in last.children.values())
        if not last.children or ended > 0:
            self.threads(last)
        if last.children:
            self.out.append('<div class="kids">')
            for child in sorted(last.children.values(), key=lambda c: -len(c.threads)):
                self.node(child)
            self.out.append("</div>")
        self.out.append("</details>")


def render_tree(stacks: list[ThreadStack], title: str, writer: _Writer) -> str:
    root = merge(stacks)
    writer.out = []
    for child in sorted(root.children.values(), key=lambda c: -len(c.threads)):
        writer.node(child)
    n = len(stacks)
    sources = ", ".join(sorted({st.source for st in stacks}))
    head = f"<h3>{escape(title)}: {n} thread{'' if n == 1 else 's'} ({escape(sources)})</h3>"
    return head + '<div class="tree">' + "".join(writer.out) + "</div>"


def render_stack_tree(samples: SampleSet | None, verdict: Verdict | None) -> str:
    """The section's body: one merged tree per kind of stack, or why there is none."""
    if samples is None:
        return '<p class="muted">No stacks: nothing was sampled (the run ended by itself).</p>'
    activity = {(a.pid, a.tid): a for a in samples.activity}
    writer = _Writer(verdict, activity)
    parts = []
    native = _per_thread(samples.stacks, python=False)
    python = _per_thread(samples.stacks, python=True)
    if native:
        parts.append(render_tree(native, "Native stacks", writer))
    if python:
        parts.append(render_tree(python, "Python stacks", writer))
    if not parts:
        tools = ", ".join(f"{k}: {v}" for k, v in samples.tools.items()) or "none"
        return f'<p class="muted">No stacks were taken (tools: {escape(tools)}).</p>'
    buttons = (
        '<p class="tools"><button type="button" data-expand="1">expand all</button> '
        '<button type="button" data-expand="0">collapse all</button> '
        '<span class="muted">count: threads through the frame; outermost frame first; '
        "<b>bold</b>: the program's own code</span></p>"
    )
    return buttons + "".join(parts)
