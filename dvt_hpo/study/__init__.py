"""The orchestrator's study: the loop (ask -> launch -> tell, ``loop``) and what it composes.

- Before the loop: opening a study for a run (``setup``), seeding it (``seeding``), the handle a
  trial's run gets (``handle``), the observers' fan-out (``observers``).
- Each launch: one policy over the timeout, the caller's gate, the budget and other workers'
  trials (``launch_policy``), then starting a trial (``starter``).
- One trial's run (``trial_run``), split by concept: its process supervised (``supervisor``),
  its reports and the one prune decision each gets (``reports``), and what Optuna records of
  its end (``recorder``).
- Beside the loop: the heartbeats and the sweep of other workers' trials (``sweeper``),
  ``trials.pause`` applied at the loop's moments (``pausing``), local workers (``workers``), the
  run's messages (``messages``) and library warnings in dvt-hpo's voice (``library_warnings``).

Its rules live in the packages below: ``recovery``, ``stopping``, ``results``, ``budget``,
``sampling``. Never imports torch."""
