"""A study run, put together: what ``dvt-hpo run`` and :func:`dvt_hpo.run_study` check on the
machine before anything is written (``preflight``), the observers a study file asks for
(``observers``: progress, MLflow, Slurm ids) and the loop handed them with a Slurm job's
time-limit gate (``runner``). Above ``views``, ``tracking`` and ``cluster``, so that ``study/``
imports none of them. Never imports torch."""
