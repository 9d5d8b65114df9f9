"""`pytest --hang-watch`: a watcher process outside pytest follows its process tree and the
test that runs; a test whose tree goes quiescent (or runs past --hang-timeout) gets a
report folder and fails with the verdict, its top cause and the report path, and the
session goes on. `plugin` (the options and hooks), `listener` (the thread that turns a
verdict into that test's failure), `channel` (the plugin ↔ watcher messages and the
verdict files), `watcher` (the watcher process), `resume` (the session started again in
the same process after a hang in native code), `threads` (the plugin's own threads: which
are infrastructure, how the end goes when a hung test left some), `procstart` (start times
on the clock since boot, the one both sides compare). docs/pytest.md tells it for users.
"""
