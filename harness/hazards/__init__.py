"""`--hazards` (docs/hazards.md): what a run did that can hang on another host or another
run, recorded even when this run passes — fork without exec beside live threads or an
OpenMP team, lock-order cycles — by an LD_PRELOAD shim and a Python start-up hook, both
written here, in the run's own report folder; read back after the run into `Hazard`s."""
