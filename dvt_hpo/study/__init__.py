"""The orchestrator's study: the loop (ask -> launch -> tell), one trial's run and the handle it
gets, opening a study for a run and seeding it, the observers' fan-out, the run's messages, local
workers, and library warnings in dvt-hpo's voice. Its rules live in the packages below:
``recovery``, ``stopping``, ``results``, ``budget``. Never imports torch."""
