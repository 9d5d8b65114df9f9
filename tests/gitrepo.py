"""Real git histories of the replica, for bisect tests and benchmarks.

`make_history(dest, plan)` copies upstream_pin/replica (sources only), makes a base commit
whose env_start resets serially (its `#pragma omp parallel for` removed), then one commit per
entry of `plan`, each a real content change of the C sources:

  "churn"    comments, whitespace and a renamed local near env_start (src/vecenv.h) and
             elsewhere; every churn commit changes the tree, so no two commits share a build
  "hang"     subject "compact everything": puts `#pragma omp parallel for` back into
             env_start, which deadlocks for real in the replica's default container context
  "crash"    "dashboard: strict log reads": the dashboard reads util/gpu_percent strictly
             again even in guarded builds, so the trainer exits 1 on the missing key
  "uncrash"  reverts "crash"
  "break"    a syntax error in src/puffer.c (the build fails)
  "unbreak"  removes it

Next to the repository it writes a git pin (kind "git", url = the repository, build env
REPLICA_FIX=guards so that good commits pass on a host without NVML) and a one-epoch
breakout scenario with short watchdog windows. Nothing here touches the user's files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPLICA = ROOT / "upstream_pin" / "replica"
SOURCES = ("build.sh", "config", "ocean", "src")  # the replica without its build outputs
PIN_NAME = "replica-git"
PRAGMA = "    #pragma omp parallel for schedule(static) num_threads(vec->num_workers)\n"
RESET_LOOP = "    for (int i = 0; i < vec->num_envs; i++) {\n        env_reset(&vec->envs[i]);"
ENV_START = "static void env_start(VecEnv* vec) {\n"
GIT_TIMEOUT_S = 60
SUBJECTS = {
    "hang": "compact everything",
    "crash": "dashboard: strict log reads",
    "uncrash": "dashboard: guard log reads again",
    "break": "wip: split the reset loop",
    "unbreak": "fix the build",
}
ONE_EPOCH = 262_144  # breakout: 4096 agents x horizon 64


@dataclass
class History:
    root: Path  # the git repository
    pin: Path  # the test pin (a .toml outside the repository)
    scenario: Path  # one epoch of breakout, short watchdog windows
    commits: list[str] = field(default_factory=list)  # oldest first; commits[0] is the base
    subjects: list[str] = field(default_factory=list)

    def index(self, subject: str) -> int:
        return self.subjects.index(subject)

    def sha(self, subject: str) -> str:
        return self.commits[self.index(subject)]

    @property
    def first_bad(self) -> str:
        return self.sha(SUBJECTS["hang"])


def git(root: Path, *args: str, date: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Bisect Test",
        "GIT_AUTHOR_EMAIL": "bisect@example.invalid",
        "GIT_COMMITTER_NAME": "Bisect Test",
        "GIT_COMMITTER_EMAIL": "bisect@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(root.parent),  # no user config (signing, hooks) leaks into the history
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    res = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout.strip()


# ---------------------------------------------------------------- edits of the tree


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        raise AssertionError(f"{path.name}: edit anchor not found: {old!r}")
    path.write_text(text.replace(old, new, 1))


def _serial_reset(root: Path) -> None:
    """The base: env_start's reset loop without its OpenMP pragma (nor the #ifndef around it)."""
    vec = root / "src" / "vecenv.h"
    text = vec.read_text()
    guarded = "#ifndef REPLICA_SERIAL_OMP_ENV\n" + PRAGMA + "#endif\n"
    start = text.index(ENV_START)
    at = text.index(guarded, start)
    vec.write_text(text[:at] + text[at + len(guarded) :])


def _set_marker(path: Path, prefix: str, line: str, anchor: str) -> None:
    """Replace the line starting with `prefix`, or insert `line` before `anchor`."""
    text = path.read_text()
    pattern = re.compile(rf"^{re.escape(prefix)}.*\n", re.M)
    if pattern.search(text):
        path.write_text(pattern.sub(line + "\n", text, count=1))
    else:
        _edit(path, anchor, line + "\n" + anchor)


def _churn(root: Path, n: int) -> None:
    vec = root / "src" / "vecenv.h"
    # always: a revision comment right above env_start, so every churn commit is a new tree
    _set_marker(vec, "/* env_start revision", f"/* env_start revision {n} */", ENV_START)
    kind = n % 4
    if kind == 1:  # rename the local that holds pthread_create's result
        text = vec.read_text()
        old = re.search(r"int (\w+) = pthread_create", text)
        assert old is not None
        name = old.group(1)
        text = text.replace(f"int {name} = pthread_create", f"int rc{n} = pthread_create")
        vec.write_text(text.replace(f"if ({name} != 0)", f"if (rc{n} != 0)"))
    elif kind == 2:  # whitespace: the thread-name buffer's declaration, re-spaced
        text = vec.read_text()
        text = re.sub(r"char name\[ *32 *\];", "char name[" + " " * (n % 3) + "32];", text)
        vec.write_text(text)
    elif kind == 3:  # elsewhere: the trainer and dashboard sources
        puffer, dash = root / "src" / "puffer.c", root / "src" / "dashboard.h"
        _set_marker(puffer, "/* churn", f"/* churn {n}: tidy */", "#include <assert.h>")
        _set_marker(dash, "/* layout rev", f"/* layout rev {n} */", "static double dash_get(")


def _hang(root: Path) -> None:
    vec = root / "src" / "vecenv.h"
    text = vec.read_text()
    start = text.index(ENV_START)
    at = text.index(RESET_LOOP, start)
    vec.write_text(text[:at] + PRAGMA + text[at:])


STRICT = "#ifdef REPLICA_GUARDED_READS\n    return dict_get_default(log, key, NAN);"
LOOSE = "#ifdef REPLICA_GUARDED_READS_SOMEDAY\n    return dict_get_default(log, key, NAN);"
BROKEN = "static int wip_split = ;  /* half-done */\n"


def _apply(root: Path, step: str, n: int) -> None:
    dash = root / "src" / "dashboard.h"
    puffer = root / "src" / "puffer.c"
    if step == "churn":
        _churn(root, n)
    elif step == "hang":
        _hang(root)
    elif step == "crash":
        _edit(dash, STRICT, LOOSE)
    elif step == "uncrash":
        _edit(dash, LOOSE, STRICT)
    elif step == "break":
        puffer.write_text(puffer.read_text() + BROKEN)
    elif step == "unbreak":
        _edit(puffer, BROKEN, "")
    else:
        raise ValueError(f"unknown history step {step!r}")


# ---------------------------------------------------------------- pin, scenario, history


def write_pin(path: Path, repo: Path, tip: str) -> None:
    path.write_text(
        f"""# generated by tests/gitrepo.py: a git history of the replica
schema_version = 1
name = "{PIN_NAME}"
description = "generated git history of the replica (bisect tests)"
envs = ["breakout", "cartpole", "pinball"]
parser = "puffer5"

[source]
kind = "git"
url = "{repo}"
branch = "main"
commit = "UNVERIFIED:{tip[:12]}"

[build]
command = "bash build.sh {{env}}"
timeout_s = 120
tools = ["gcc"]
outputs = ["puffer"]
env = {{REPLICA_FIX = "guards"}}

[run]
command = "./puffer train {{env}} --train.total-timesteps={{steps}}"

[variants]
fixed = "omp-free"

[[signatures]]
name = "env_start"
functions = ['env_start', 'env_start\\._omp_fn\\.\\d+']

[[signatures]]
name = "vec_thread_main"
functions = ['vec_thread_main', 'vec_thread_main\\._omp_fn\\.\\d+']

[files]
"""
    )


def write_scenario(path: Path, startup_s: float = 4, stall_s: float = 4) -> None:
    path.write_text(
        f"""# generated by tests/gitrepo.py: one epoch of breakout, short watchdog windows
schema_version = 1
env = "breakout"
description = "bisect tests: one epoch of breakout"

[defaults]
steps = {ONE_EPOCH}
startup_s = {startup_s}
stall_s = {stall_s}
timeout_s = 60

[pin."{PIN_NAME}"]

[[checks]]
name = "epochs >= 1"
kind = "range"
key = "epoch"
min = 1
over = "last"

[[checks]]
kind = "required"
keys = ["SPS", "agent_steps", "uptime", "epoch", "env/perf"]
"""
    )


def plan_with(n: int, at: dict[int, str]) -> list[str]:
    """A plan of `n` commits after the base: churn everywhere but at the given positions
    (1-based commit indices, the base being 0)."""
    return [at.get(i, "churn") for i in range(1, n + 1)]


def make_history(dest: Path, plan: Sequence[str]) -> History:
    dest.mkdir(parents=True, exist_ok=True)
    root = dest / "repo"
    root.mkdir()
    for name in SOURCES:
        src = REPLICA / name
        if src.is_dir():
            shutil.copytree(src, root / name)
        else:
            shutil.copy2(src, root / name)
    (root / ".gitignore").write_text("puffer\nlogs/\ncheckpoints/\n")
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "config", "commit.gpgsign", "false")
    _serial_reset(root)
    history = History(root, dest / f"{PIN_NAME}.toml", dest / "bisect-breakout.toml")
    _commit(history, "base: serial env reset", 0)
    for n, step in enumerate(plan, start=1):
        _apply(root, step, n)
        subject = SUBJECTS.get(step, f"churn {n}: tidy vecenv and friends")
        _commit(history, subject, n)
    write_pin(history.pin, root, history.commits[-1])
    write_scenario(history.scenario)
    return history


def _commit(history: History, subject: str, n: int) -> None:
    # fixed dates: the same plan gives the same commits, hence the same build cache keys
    date = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00"
    git(history.root, "add", "-A")
    git(history.root, "commit", "--quiet", "--no-verify", "-m", subject, date=date)
    history.commits.append(git(history.root, "rev-parse", "HEAD"))
    history.subjects.append(subject)
