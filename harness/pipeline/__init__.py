"""The data flow of the run-like commands, in one direction:
pin → verify source → prepare the variant's tree → build → run under the watchdog →
classify → check → report. `run` holds `harness run` and `harness watch`; `stages` the
verify/prepare/build steps shared with build, compare, probe and bisect; `compare`, `saved`
(re-checking a saved report) and `probe` the other commands' flows; `options` the one set of
run options every run-like command embeds."""
