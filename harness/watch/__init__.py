"""The watching half of a run: judging a live process tree it did not write. The watchdog's
triggers over an injected clock (`watchdog`), the watch loop that looks at the tree every
quarter second (`watchloop`: `treewalk`, `treefacts`, `syscalls`), what each thread waits on
(`quiescence`, `fdwaits`, `housekeeping`), who can wake it (`wakegraph` over `wakefacts` and
`wakeread`), and the triggers that end a watch early (`closedwatch`, `attrigger`). The
running half (starting, feeding and reaping processes) is harness/execute/."""
