"""A worker's death and a trial's second chance, shared by every worker through the storage:
failed attempts retried exactly once and the sweep that repairs what a dead worker left
(``retries``), the stale-heartbeat rule (``stale``), ``trials.resume`` on the orchestrator side
(``resume``), failures of the machine rather than the params and the broken-node rule
(``node_health``, pure), the record of a worker stopped on a broken node (``stopped_nodes``), and
the named steps where the crash tests kill a worker (``kill_points``). Below ``study`` (the loop
and a trial's run call it); orchestrator side only."""
