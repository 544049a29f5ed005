"""What trials come to: a finished trial's outcome, the pure rule that decides it (``outcome``)
and the one epoch its values come from (``reduction``); the study's best feasible trial or
Pareto front (``front``); and the events that tell observers of them (``events``, stdlib only:
what ``tracking``, ``cluster``, ``views`` and ``run`` observe). Below ``recovery`` and
``stopping``; orchestrator side only."""
