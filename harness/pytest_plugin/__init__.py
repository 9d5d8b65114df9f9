"""`pytest --hang-watch`: a watcher process outside pytest follows its process tree and the
test that runs; a test whose tree goes quiescent (or runs past --hang-timeout) gets a
report folder and fails with the verdict, its top cause and the report path, and the
session goes on. `plugin` (the options and hooks), `listener` (the thread that turns a
verdict into that test's failure), `phasemem` (the test phase, in memory shared with the
watcher), `channel` (the plugin ↔ watcher messages and the verdict files), `launch` (the
watcher's start), `watcher` (the watcher process), `resume` (the session's journal, and the
session started again after a hang that cannot be interrupted), `restart` (that exec, from
the listener or through gdb), `threads` (the plugin's own threads: which are infrastructure,
how the end goes when a hung test left some), `procstart` (start times on the clock since
boot, the one both sides compare), `pinned` (what the plugin calls in pytest's process,
taken at import: a test's patches never reach it), `notes` (the plugin's own failures, in
the summary). docs/pytest.md tells it for users.
"""
