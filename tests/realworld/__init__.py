"""The real-world hang corpus (issue 18): programs from public reports, their expected
verdicts in cases.toml, read by `corpus`."""
