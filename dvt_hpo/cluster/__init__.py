"""Workers on a cluster's scheduler: ``dvt-hpo submit``, ``cancel`` and the workers' Slurm side.

A worker is one ``dvt-hpo run`` (an orchestrator); on Slurm each array task of a submitted job
runs one, all on the same study database. Modules: ``slurm`` (the Slurm commands and the
job's environment), ``jobs`` (the jobs recorded in the study, their state, ``cancel``),
``submit`` (the job array through submitit), ``array_task`` (what each array task runs),
``time_limit`` (no trial started that the job's time limit would cut) and ``observer`` (each
trial records where it ran). Stdlib only, but ``submit`` (submitit): the orchestrator side
never imports torch.
"""
