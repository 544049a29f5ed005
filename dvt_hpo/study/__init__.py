"""The orchestrator's study: the loop (ask -> launch -> tell), one trial's run, its outcome,
recovery and retries, stop rules and signals, events and observers, feasibility and the front,
opening a study for a run, the sampler/pruner factory, the search space, local workers, and the
preflight checks of `run` and `validate`. Never imports torch."""
