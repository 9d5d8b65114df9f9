"""Sampling a hung process tree: every thread's /proc state and CPU use over a few
snapshots (`procfs`), then one set of native and Python stacks per process taken with gdb,
eu-stack or py-spy (`stacks`, parsed by `parsers`, frames attributed by `frames`), gathered
into the `model` dataclasses by `sample.sample_tree`, which the watchdog calls and
`classify` reads."""
