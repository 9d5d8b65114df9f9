"""`harness triage ENV`: the whole investigation in one command (docs/triage.md)."""
