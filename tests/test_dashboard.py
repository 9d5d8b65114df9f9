"""Dashboard parsing: the documented layouts (samples in tests/data, written by us from
docs/formats.md), a recorded PufferLib 3.0.0 run, value rules, end-of-run logs, and
robustness against any input (tests/data/README.md says where each sample comes from)."""

from __future__ import annotations

import json
import math
import os
import random
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import dashboard
from harness.analysis import endlogs
from harness.dashboard import MetricsFrame, parse_text

DATA = Path(__file__).parent / "data"
P5 = (DATA / "puffer5_sample.txt").read_text(encoding="utf-8")
P5_ONELINE = (DATA / "puffer5_oneline.txt").read_text(encoding="utf-8")
P3 = (DATA / "puffer3_sample.txt").read_text(encoding="utf-8")
P3_CARTPOLE = (DATA / "puffer3_cartpole_cpu.txt").read_text(encoding="utf-8")  # a real run
SAMPLES = [("puffer5", P5), ("puffer5", P5_ONELINE), ("puffer3", P3)]
FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)

# --- 5.0 box ----------------------------------------------------------------------------------

P5_FRAME0 = {
    "util/gpu_percent": 87.0,
    "util/vram_used_gb": 3.1,
    "util/vram_total_gb": 48.0,
    "util/cpu_mem_gb": 2.4,
    "params": 1.2e6,
    "agent_steps": 262100.0,
    "SPS": 77000.0,
    "epoch": 1.0,
    "uptime": 3.405,
    "to_go": 16.987,
    "perf/rollout": 3.412,
    "perf/rollout_pct": 79.0,
    "perf/eval_model": 1.024,
    "perf/eval_model_pct": 23.0,
    "perf/eval_env": 2.187,
    "perf/eval_env_pct": 50.0,
    "perf/eval_copy": 0.201,
    "perf/eval_copy_pct": 4.0,
    "perf/train": 0.907,
    "perf/train_pct": 20.0,
    "perf/train_model": 0.811,
    "perf/train_model_pct": 18.0,
    "perf/train_misc": 0.096,
    "perf/train_misc_pct": 2.0,
    "loss/total": 0.412,
    "loss/policy": -0.013,
    "loss/value": 0.051,
    "loss/entropy": 0.693,
    "loss/old_kl": 0.002,
    "loss/kl": 0.001,
    "loss/clipfrac": 0.043,
    "env/perf": 0.012,
    "env/score": 10.5,
    "env/episode_return": 10.5,
    "env/episode_length": 311.25,
}

P5_LAST = {  # the replica-style frame: extra env rows and a titled "Clipping" section
    "util/gpu_percent": 0.0,
    "util/vram_used_gb": 0.0,
    "util/vram_total_gb": 0.0,
    "util/cpu_mem_gb": 0.1,
    "params": 812400.0,
    "agent_steps": 786400.0,
    "SPS": 81900.0,
    "epoch": 3.0,
    "uptime": 9.902,
    "to_go": 3.201,
    "perf/rollout": 1.25,
    "perf/rollout_pct": 70.0,
    "perf/eval_model": 0.25,
    "perf/eval_model_pct": 14.0,
    "perf/eval_env": 1.0,
    "perf/eval_env_pct": 56.0,
    "perf/eval_copy": 0.0,
    "perf/eval_copy_pct": 0.0,
    "perf/train": 0.536,
    "perf/train_pct": 30.0,
    "perf/train_model": 0.5,
    "perf/train_model_pct": 28.0,
    "perf/train_misc": 0.036,
    "perf/train_misc_pct": 2.0,
    "loss/total": 0.301,
    "loss/policy": -0.021,
    "loss/value": 0.039,
    "loss/entropy": 0.671,
    "loss/old_kl": 0.004,
    "loss/kl": 0.003,
    "loss/clipfrac": 0.062,
    "env/perf": 0.055,
    "env/score": 47.25,
    "env/episode_return": 51.0,
    "env/episode_length": 455.125,
    "env/reward_raw_max": 4.0,
    "env/reward_clamped_min": -1.0,
    "env/n": 128.0,
    "clipping/ratio_clipped_frac": 0.043,
    "clipping/grad_norm_clipped": 1.0,
}


def test_puffer5_box_frames() -> None:
    frames = parse_text("puffer5", P5)
    assert [f.index for f in frames] == [0, 1, 2, 3]
    assert [f.complete for f in frames] == [True, True, True, False]
    assert frames[0].metrics == pytest.approx(P5_FRAME0)
    assert frames[0].text == {"version": "5.0", "env": "breakout"}
    assert frames[0].line_no == 15
    assert frames[2].metrics == pytest.approx(P5_LAST)
    assert frames[2].line_no == 48


def test_puffer5_older_durations_and_cut_timing_cells() -> None:
    """Older 5.0 commits print d/h/m/s: "To go" reads fine, 6-column timing cells are cut
    ("0d 0h") and must not turn into zeros; their share column still reads."""
    m = parse_text("puffer5", P5)[1].metrics
    assert m["to_go"] == 13.0 and m["uptime"] == pytest.approx(6.711)
    for key in ("perf/rollout", "perf/eval_model", "perf/eval_env"):
        assert key not in m
    assert m["perf/rollout_pct"] == 80.0 and m["perf/eval_copy"] == pytest.approx(0.198)


def test_puffer5_truncated_tail_is_not_complete() -> None:
    frames = parse_text("puffer5", P5)
    tail = frames[-1]
    assert not tail.complete and tail.metrics["agent_steps"] == 1e6
    assert "env/score" not in tail.metrics  # the cut came before the env section
    assert dashboard.latest(frames)["agent_steps"] == 786400.0  # latest() skips it
    parser = dashboard.get_parser("puffer5")
    fed = [f for line in P5.split("\n") for f in parser.feed(line)]
    assert len(fed) == 3 and all(f.complete for f in fed)  # feed() never reports it


def test_puffer5_oneline() -> None:
    frames = parse_text("puffer5", P5_ONELINE)
    assert len(frames) == 5
    assert frames[0].metrics == {
        "agent_steps": 262100.0,
        "SPS": 77000.0,
        "env/score": 10.5,
        "epoch": 1.0,
        "to_go": pytest.approx(16.987),
    }
    assert frames[0].text == {"version": "5.0", "env": "breakout"}
    # cut at 59 columns: "score" never got its "=", so only fields followed by two spaces count
    assert frames[2].metrics == {"agent_steps": 786400.0, "SPS": 81900.0}
    # a one-row terminal: two frames on one line, split at the cursor-home escape
    assert frames[3].line_no == frames[4].line_no == 4
    assert frames[4].metrics == {
        "agent_steps": 1.3e6,
        "SPS": 80600.0,
        "env/score": 70.125,
        "epoch": 5.0,
        "to_go": pytest.approx(62.345),
    }


def test_puffer5_tty_colours_are_ignored() -> None:
    def colour(line: str) -> str:
        return "\x1b[97m" + line.replace("│", "│\x1b[0m\x1b[96m", 1) + "\x1b[0m\x1b[K"

    tty = "\x1b[?2026h\x1b[H\x1b[J" + "\n".join(colour(x) for x in P5.split("\n"))
    assert [f.metrics for f in parse_text("puffer5", tty)] == [
        f.metrics for f in parse_text("puffer5", P5)
    ]


def test_puffer5_generic_rows_and_titled_rule() -> None:
    """Rows off the upstream geometry are read as tokens; "├─ Title ─┤" opens a section."""
    text = "\n".join(
        [
            "╭" + "─" * 20 + "╮",
            "│ PufferLib 5.0 🐡 GPU: 12% VRAM: 1.0/8G RAM: 0.5G │",
            "│ │",
            "│ Env breakout Evaluate 1s 100 60% Losses 0.5 │",
            "│ Steps 1.5M Env 200ms 10% value 0.25 │",
            "│ To go 1m 02s 345ms Misc 0d 0h 5% clipfrac │",
            "│ │",
            "│ score 3.5 reward_raw_max 2 │",
            "├─ Rewards ──────┤",
            "│ clamped_frac 0.125 │",
            "╰" + "─" * 20 + "╯",
        ]
    )
    (frame,) = parse_text("puffer5", text)
    assert frame.text["env"] == "breakout"
    assert frame.metrics == pytest.approx(
        {
            "util/gpu_percent": 12.0,
            "util/vram_used_gb": 1.0,
            "util/vram_total_gb": 8.0,
            "util/cpu_mem_gb": 0.5,
            "perf/rollout": 1.1,
            "perf/rollout_pct": 60.0,
            "loss/total": 0.5,
            "agent_steps": 1.5e6,
            "perf/eval_env": 0.2,
            "perf/eval_env_pct": 10.0,
            "loss/value": 0.25,
            "to_go": 62.345,
            "perf/eval_misc_pct": 5.0,
            "env/score": 3.5,
            "env/reward_raw_max": 2.0,
            "rewards/clamped_frac": 0.125,
        }
    )


# --- 3.0 rich box -----------------------------------------------------------------------------

P3_FRAME0 = {
    "util/cpu_percent": 12.5,
    "util/gpu_percent": 0.0,
    "util/dram_percent": 31.2,
    "util/vram_percent": 0.0,
    "params": 148600.0,
    "agent_steps": 0.0,
    "SPS": 0.0,
    "epoch": 0.0,
    "uptime": 0.0,
    **{
        f"perf/{k}{s}": 0.0
        for k in (
            "eval",
            "eval_forward",
            "env",
            "eval_copy",
            "eval_misc",
            "train",
            "train_forward",
            "learn",
            "train_copy",
            "train_misc",
        )
        for s in ("", "_pct")
    },
}

P3_LAST = {
    "util/cpu_percent": 47.9,
    "util/gpu_percent": 0.0,
    "util/dram_percent": 33.1,
    "util/vram_percent": 0.0,
    "params": 148600.0,
    "agent_steps": 2e6,
    "SPS": 85100.0,
    "epoch": 62.0,
    "uptime": 63.0,
    "remaining": 0.0,
    "perf/eval": 11.0,
    "perf/eval_pct": 61.0,
    "perf/eval_forward": 4.0,
    "perf/eval_forward_pct": 22.0,
    "perf/env": 5.0,
    "perf/env_pct": 29.0,
    "perf/eval_copy": 1.0,
    "perf/eval_copy_pct": 4.0,
    "perf/eval_misc": 1.0,
    "perf/eval_misc_pct": 5.0,
    "perf/train": 7.0,
    "perf/train_pct": 38.0,
    "perf/train_forward": 2.0,
    "perf/train_forward_pct": 12.0,
    "perf/learn": 3.0,
    "perf/learn_pct": 17.0,
    "perf/train_copy": 0.0,
    "perf/train_copy_pct": 2.0,
    "perf/train_misc": 1.0,
    "perf/train_misc_pct": 5.0,
    "loss/policy_loss": -0.008,
    "loss/value_loss": 0.021,
    "loss/entropy": 0.874,
    "loss/old_approx_kl": 0.002,
    "loss/approx_kl": 0.002,
    "loss/clipfrac": 0.037,
    "loss/importance": 0.998,
    "loss/explained_variance": 0.733,
    "env/perf": 0.412,
    "env/score": 356.0,
    "env/episode_return": 41.25,
    "env/episode_length": 2210.5,
    "env/n": 48.0,
}


def test_puffer3_frames() -> None:
    frames = parse_text("puffer3", P3)
    assert len(frames) == 3 and all(f.complete for f in frames)  # the cut 4th is dropped
    assert frames[0].metrics == pytest.approx(P3_FRAME0)
    assert frames[0].text == {
        "version": "3.0",
        "env": "puffer_brea…",  # rich cut it at 80 columns; kept as shown
        "remaining": "A hair past a freckle",  # wrapped over two lines
    }
    assert frames[0].line_no == 17
    assert frames[-1].metrics == pytest.approx(P3_LAST)
    assert frames[-1].line_no == 59


P3_WIDE = (
    "\x1b[0;0H"
    + """\
╭──────────────────────────────────────────────────────────────────────────────────────────────────╮
│  PufferLib 3.0    🐡                 CPU: 45.2%      GPU: 0.0%     DRAM: 12.5%       VRAM: 0.0%  │
│                                                                                                  │
│  Summary                 Value    Evaluate             3s   62%    Losses                 Value  │
│  Env           puffer_breakout      Forward            1s   21%    policy_loss           -0.012  │
│  Params                   1.2M      Env                1s   30%    value_loss             0.034  │
│  Steps                  524.3K      Copy               0s    4%    entropy                1.052  │
│  SPS                     87.4K      Misc               0s    5%    old_approx_kl          0.003  │
│  Epoch                      16    Train                2s   37%    approx_kl              0.002  │
│  Uptime                     6s      Forward            0s   11%    clipfrac               0.041  │
│  Remaining              1m 17s      Learn              1s   17%    importance             1.001  │
│                                     Copy               0s    2%    explained_variance     0.512  │
│                                     Misc               0s    5%                                  │
│                                                                                                  │
│  User Stats                              Value    User Stats                              Value  │
│  perf                                    0.125    score                                 108.000  │
│  episode_return                         12.500    episode_length                       1543.200  │
╰──────────────────────────────────────────────────────────────────────────────────────────────────╯
"""
)


def test_puffer3_other_width() -> None:
    (frame,) = parse_text("puffer3", P3_WIDE)
    m = frame.metrics
    assert frame.text["env"] == "puffer_breakout"
    assert (m["util/cpu_percent"], m["params"], m["remaining"]) == (45.2, 1.2e6, 77.0)
    assert (m["perf/train_forward"], m["perf/train_forward_pct"]) == (0.0, 11.0)
    assert m["loss/explained_variance"] == 0.512 and m["env/episode_length"] == 1543.2


def test_puffer3_recorded_cartpole_run() -> None:
    """Real PufferLib 3.0.0 output (cartpole on CPU, stdout and stderr): warnings before the
    first box, 64 boxes, labels and a key cut by rich ("…"), a CPU value wrapped onto the
    next line, and a negative "Remaining" in the last box, kept as text."""
    frames = parse_text("puffer3", P3_CARTPOLE)
    assert len(frames) == 64 and all(f.complete for f in frames)
    assert [f.metrics["epoch"] for f in frames] == [*range(63), 62]  # a final box, epoch 62
    assert [f.line_no for f in frames[:3]] == [20, 41, 62] and frames[-1].line_no == 1404
    first, second, last = frames[0], frames[1], frames[-1]
    assert first.text == {
        "version": "3.0",
        "env": "puffer_cart…",
        "remaining": "A hair past a freckle",
    }
    assert (first.metrics["params"], first.metrics["agent_steps"]) == (133100.0, 0.0)
    assert {"params", "agent_steps"} <= set(first.metrics)  # a frame with keys, whose
    assert not any(k.startswith(("loss/", "env/")) for k in first.metrics)  # panels are empty
    env_keys = {
        "env/score",
        "env/perf",
        "env/episode_length",
        "env/x_threshold_terminati…",  # cut by rich, kept as shown
        "env/pole_angle_termination",
        "env/max_steps_termination",
        "env/n",
    }
    assert {k for k in second.metrics if k.startswith("env/")} == env_keys
    s = second.metrics
    assert (s["agent_steps"], s["SPS"], s["env/score"], s["remaining"]) == (
        32800.0,
        66400.0,
        20.213,
        29.0,
    )
    assert all(set(f.metrics) == set(second.metrics) for f in frames[1:-1])
    assert last.text["remaining"] == "-1h 59m 56s" and "remaining" not in last.metrics
    assert set(last.metrics) == set(second.metrics) - {"remaining"}
    m = last.metrics
    assert (m["util/cpu_percent"], m["agent_steps"], m["SPS"], m["uptime"]) == (
        4858.8,  # "CPU:" on one line, "4858.8%" on the next
        3.1e6,
        264100.0,
        52.0,
    )
    assert (m["env/score"], m["env/x_threshold_terminati…"]) == (127.047, 0.152)
    assert dashboard.latest(frames)["remaining"] == 0.0  # the last box that showed a number


def test_box_parsers_read_either_version() -> None:
    by_puffer5 = [f.metrics for f in parse_text("puffer5", P3)]
    assert len(by_puffer5) == 3 and by_puffer5[-1] == pytest.approx(P3_LAST)
    assert by_puffer5 == [f.metrics for f in parse_text("puffer3", P3)]


# --- values -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shown", "value"),
    [
        ("523.4", 523.4),
        ("1.2K", 1200.0),
        ("262.1K", 262100.0),
        ("3.4M", 3.4e6),
        ("5B", 5e9),
        ("1.10T", 1.1e12),
        ("87%", 87.0),
        ("2.4G", 2.4),
        ("-0.013", -0.013),
        ("45s", 45.0),
        ("1m 30s", 90.0),
        ("1m30s", 90.0),
        ("2h 3m", 7380.0),
        ("201ms", 0.201),
        ("3s 405ms", 3.405),
        ("1m 02s 345ms", 62.345),
        ("1d 2h 3m 4s", 93784.0),
        ("1s 234", 1.234),
        ("12s 34", 12.34),
        ("1543.2…", 1543.2),
        ("inf", float("inf")),
    ],
)
def test_parse_value(shown: str, value: float) -> None:
    assert dashboard.parse_value(shown) == pytest.approx(value)


@pytest.mark.parametrize(
    "shown", ["", "breakout", "n/a", "5min", "3s 2m", "1m 0", "12345…", "A hair past a freckle"]
)
def test_parse_value_rejects(shown: str) -> None:
    assert dashboard.parse_value(shown) is None


def test_parse_value_nan() -> None:
    value = dashboard.parse_value("-nan")
    assert value is not None and value != value


# --- parsers, frames, limits ------------------------------------------------------------------


def test_unknown_parser() -> None:
    with pytest.raises(ValueError, match=r"unknown dashboard parser 'nope'.*lines"):
        dashboard.get_parser("nope")
    assert set(dashboard.PARSERS) == {"puffer5", "puffer3", "lines"}


def test_lines_parser() -> None:
    frames = parse_text("lines", "a\n\n  \n\x1b[0m\nb\nc")
    assert [(f.index, f.line_no, f.metrics) for f in frames] == [(0, 1, {}), (1, 5, {}), (2, 6, {})]


def test_other_boxes_are_not_frames() -> None:
    traceback = "╭" + "─" * 30 + "╮\n│ Traceback (most recent call last) │\n╰" + "─" * 30 + "╯\n"
    assert parse_text("puffer5", traceback + P5)[0].metrics == pytest.approx(P5_FRAME0)
    assert parse_text("puffer3", traceback) == []


def test_cursor_home_drops_a_cut_frame() -> None:
    first = P5.split("\n")[1:8]  # a box cut after the panel's fourth row
    frames = parse_text("puffer5", "\n".join(first) + "\n\x1b[H" + P5)
    assert len(frames) == 4 and frames[0].metrics == pytest.approx(P5_FRAME0)


def test_oversized_box_is_discarded_and_parsing_recovers() -> None:
    box = "╭──╮\n│ PufferLib 5.0 │\n" + "│ score 1.0 │\n" * 600 + "╰──╯\n"
    frames = parse_text("puffer5", box + P5)
    assert frames[0].metrics == pytest.approx(P5_FRAME0)


def test_keys_per_frame_are_capped() -> None:
    rows = "".join(f"│ k{i} 1.0 j{i} 2.0 l{i} 3 m{i} 4 │\n" for i in range(450))
    (frame,) = parse_text("puffer5", "╭──╮\n│ PufferLib 5.0 │\n│ │\n" + rows + "╰──╯\n")
    assert len(frame.metrics) + len(frame.text) == dashboard.MAX_KEYS


def test_latest_merges_complete_frames() -> None:
    frames = [
        MetricsFrame(0, {"a": 1.0, "b": 2.0}, {}, 1),
        MetricsFrame(1, {"a": 3.0}, {}, 2),
        MetricsFrame(2, {"a": 9.0, "c": 1.0}, {}, 3, complete=False),
    ]
    assert dashboard.latest(frames) == {"a": 3.0, "b": 2.0}
    assert dashboard.latest([]) == {}


def test_huge_line_is_cut_in_bounded_memory() -> None:
    big = "x" * 50_000_000 + "\n" + P5
    tracemalloc.start()
    try:
        frames = parse_text("puffer5", big)
        for name in dashboard.PARSERS:
            dashboard.get_parser(name).feed(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak
    assert frames[0].metrics == pytest.approx(P5_FRAME0)


# --- end-of-run logs --------------------------------------------------------------------------


def _write(path: Path, text: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (mtime, mtime))


def test_read_run_logs(tmp_path: Path) -> None:
    ini = "# PufferLib log v1\n[base]\nenv_name = breakout\n\n[metrics]\n"
    _write(tmp_path / "logs/breakout/100.ini", ini + "SPS = 1\n", 1000)
    _write(
        tmp_path / "logs/breakout/200.ini",
        ini + "SPS = 80000.5,81000.25\nagent_steps = 1048576\nenv/score = nan\nbad = x\n"
        "[other]\nSPS = 3\n",
        2000,
    )
    records = [{"loss/kl": 0.5, "SPS": 1.0}, "junk", {"loss/kl": 0.25, "ok": True, "s": "x"}]
    jsonl = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records)
    _write(tmp_path / "logs/breakout/200.jsonl", jsonl + "\n[[[" * 10, 2000)
    _write(tmp_path / "logs/cartpole/300.ini", ini + "SPS = 7\n", 1500)
    got = endlogs.read_run_logs(tmp_path, "breakout")
    assert math.isnan(got.pop("env/score"))  # "nan" is kept, as a NaN
    assert got == {"SPS": 81000.25, "agent_steps": 1048576.0, "loss/kl": 0.25}
    assert endlogs.read_run_logs(tmp_path)["agent_steps"] == 1048576.0  # newest of all envs
    assert endlogs.read_run_logs(tmp_path, "cartpole") == {"SPS": 7.0}
    assert endlogs.read_run_logs(tmp_path, "pinball") == {}
    assert endlogs.read_run_logs(tmp_path / "nowhere") == {}


# --- properties -------------------------------------------------------------------------------

ANSI = st.sampled_from(
    [
        "\x1b[97m",
        "\x1b[0m",
        "\x1b[90m",
        "\x1b[K",
        "\x1b[J",
        "\x1b[?2026h",
        "\x1b[?2026l",
        "\x1b]0;t\x07",
    ]
)


@FAST
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for name in dashboard.PARSERS:
        parse_text(name, text)


@FAST
@given(st.text(max_size=2000))
def test_random_text_never_raises(text: str) -> None:
    for name in dashboard.PARSERS:
        parse_text(name, text)


@FAST
@given(st.lists(st.tuples(st.integers(0, len(P5)), ANSI), max_size=40))
def test_ansi_anywhere_changes_nothing(inserts: list[tuple[int, str]]) -> None:
    text = P5
    for pos, code in sorted(inserts, reverse=True):
        text = text[:pos] + code + text[pos:]
    assert parse_text("puffer5", text) == parse_text("puffer5", P5)


@FAST
@given(st.sampled_from(SAMPLES), st.randoms(use_true_random=False), st.integers(0, 60))
def test_random_escapes_and_garbage_in_samples_never_raise(
    sample: tuple[str, str], rnd: random.Random, n: int
) -> None:
    name, text = sample
    junk = ["\x1b[", "\x1b[0;0H", "\x1b[H", "\x00", "\ufffd", "╭──╮", "╰──╯", "│", "\r", "\n", "…"]
    chars = list(text)
    for _ in range(n):
        chars.insert(rnd.randrange(len(chars) + 1), rnd.choice(junk))
    for parser in dashboard.PARSERS:
        parse_text(parser, "".join(chars))
    parse_text(name, "".join(chars))


@FAST
@given(st.sampled_from([("puffer5", P5), ("puffer3", P3)]), st.data())
def test_truncated_box_output_gives_a_prefix_of_the_frames(
    sample: tuple[str, str], data: st.DataObject
) -> None:
    name, text = sample
    cut = data.draw(st.integers(0, len(text)))
    full = [f for f in parse_text(name, text) if f.complete]
    assert len(full) >= 3
    got = [f for f in parse_text(name, text[:cut]) if f.complete]
    # exactly the boxes whose closing row the cut left whole (a prefix of `full`, and an
    # empty one only when the cut comes before the first box closes)
    assert got == [f for f in full if _line_end(text, f.line_no) <= cut]


@FAST
@given(st.integers(0, len(P5_ONELINE)))
def test_truncated_oneline_output_keeps_finished_lines(cut: int) -> None:
    """A one-line frame on the cut line may lose its last field; earlier lines are exact."""
    prefix = P5_ONELINE[:cut]
    full = parse_text("puffer5", P5_ONELINE)
    assert len(full) >= 4
    done = prefix.count("\n")
    got = [f for f in parse_text("puffer5", prefix) if f.line_no <= done]
    assert got == [f for f in full if f.line_no <= done]


def _line_end(text: str, line_no: int) -> int:
    """The offset just past line `line_no` (1-based), its newline excluded."""
    start = 0
    for _ in range(line_no - 1):
        start = text.index("\n", start) + 1
    end = text.find("\n", start)
    return len(text) if end < 0 else end
