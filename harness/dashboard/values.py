"""Displayed values as numbers: the value grammar every dashboard format shares.

Value rules (``parse_value``):

- plain numbers, ``nan``/``-nan``/``inf`` as Python floats;
- count suffixes ``K``/``M``/``B``/``T`` multiply by 1e3/1e6/1e9/1e12 (``1.2K`` → 1200.0); the
  trainers print one decimal, so these values are approximate;
- ``12%`` → 12.0 (percent units, not a fraction), ``3.4G`` → 3.4 (GB, the number as shown);
- durations: ``<n>d <n>h <n>m <n>s <n>ms`` parts in decreasing order, spaces optional, to
  seconds: ``45s`` → 45.0, ``1m 30s`` → 90.0, ``2h 3m`` → 7380.0, ``12s 345ms`` → 12.345,
  ``1d 0h 0m 5s`` → 86405.0. A trailing group of 1-3 bare digits after ``s`` is the head of a
  zero-padded millisecond field cut by a narrow cell: ``1s 234`` → 1.234, ``12s 34`` → 12.34;
- a value that rich cut with ``…`` is kept only when the cut fell after the decimal point
  (``1543.2…`` → 1543.2);
- in timing cells (5.0's are 6 columns wide) a duration that does not end in seconds was cut
  (``0d 0h`` from ``0d 0h 0m 3s``) and is dropped rather than reported as a wrong number.
"""

from __future__ import annotations

import re

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(rf"({_NUM})\s?([KMBT%G]?)", re.ASCII)
_SPECIAL_RE = re.compile(r"([-+]?(?:nan|inf(?:inity)?))[%G]?", re.ASCII | re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "%": 1.0, "G": 1.0}
_EXPONENT = {"K": "e3", "M": "e6", "B": "e9", "T": "e12"}
_DUR_PART_RE = re.compile(r"\s*(\d+(?:\.\d+)?)(ms|d|h|m|s)(?![A-Za-z])", re.ASCII)
_DUR_TOKEN_RE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|d|h|m|s))+", re.ASCII)
_MS_HEAD_RE = re.compile(r"[0-9]{1,3}")
_UNIT_MS = {"d": 86_400_000.0, "h": 3_600_000.0, "m": 60_000.0, "s": 1000.0, "ms": 1.0}
_UNIT_RANK = {"d": 0, "h": 1, "m": 2, "s": 3, "ms": 4}
_TEXT_VALUES = {"n/a", "N/A", "-", "—", "?"}


def parse_number(s: str) -> float | None:
    """A number with an optional K/M/B/T, % or G suffix, or nan/inf; None otherwise."""
    s = s.strip()
    m = _NUMBER_RE.fullmatch(s)
    if m:  # scale through the exponent so "262.1K" is 262100.0 exactly, not 262100.00000000003
        exp = _EXPONENT.get(m[2], "")
        return float(m[1] + exp) if exp and "e" not in m[1].lower() else float(m[1]) * _SCALE[m[2]]
    m = _SPECIAL_RE.fullmatch(s)
    return float(m[1]) if m else None


def _duration(s: str) -> tuple[float, str] | None:
    """Seconds and the smallest unit seen, or None when s is not a duration."""
    ms, last, pos, s = 0.0, "", 0, s.strip()  # summed in ms so "3s 405ms" is exactly 3.405
    while pos < len(s):
        m = _DUR_PART_RE.match(s, pos)
        if not m or (last and _UNIT_RANK[m[2]] <= _UNIT_RANK[last]):
            break
        ms += float(m[1]) * _UNIT_MS[m[2]]
        last, pos = m[2], m.end()
    rest = s[pos:].strip()
    if not last:
        return None
    if not rest:
        return ms / 1000.0, last
    if last == "s" and _MS_HEAD_RE.fullmatch(rest):  # "1s 234": a cut "1s 234ms"
        return (ms + int(rest) * 10 ** (3 - len(rest))) / 1000.0, "ms"
    return None


def parse_duration(s: str) -> float | None:
    """Seconds for "45s", "1m 30s", "2h 3m", "12s 345ms", "1d 2h 3m 4s"; None otherwise."""
    d = _duration(s)
    return d[0] if d else None


def parse_value(s: str) -> float | None:
    """A displayed value as a float under the module's rules, or None for text."""
    s = s.strip()
    if s.endswith("…"):  # cut by rich: trust it only when the cut fell in the decimals
        head = s[:-1]
        return parse_number(head) if "." in head else None
    n = parse_number(s)
    return n if n is not None else parse_duration(s)


def is_value_token(tok: str) -> bool:
    if tok in _TEXT_VALUES or ("/" in tok and tok.endswith("G")):
        return True
    if tok.endswith("…") and parse_value(tok) is not None:
        return True
    return parse_number(tok) is not None or _DUR_TOKEN_RE.fullmatch(tok) is not None


def parse_timing(value: str) -> tuple[float | None, float | None]:
    """(seconds, percent) of a timing cell "1s 234  12%"; a cut duration gives None."""
    toks = value.split()
    pct = parse_number(toks.pop()) if toks and toks[-1].endswith("%") else None
    d = _duration(" ".join(toks)) if toks else None
    secs = d[0] if d and d[1] in ("s", "ms") else None
    return secs, pct
