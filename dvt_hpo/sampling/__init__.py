"""What Optuna is asked, orchestrator side only.

- The registry of sampler and pruner kinds and the defaults by the study's shape (``kinds``),
  and the factory that builds them (``optuna_factory``); the search space and its sampling
  (``space``); feasibility read back for a constrained sampler (``constraints``).
- dvt-hpo's own samplers: TPE at a rung (``rung_tpe``), a GP over (config, epoch) fitted on every
  curve (``mf_gp``) and the points it sees (``mf_gp_points``); one BLAS thread for their linear
  algebra, so a seeded study samples alike on every machine (``blas``).
- dvt-hpo's own pruners: the fast exact Wilcoxon test (``wilcoxon``), successive halving and that
  test together (``wilcoxon_halving``), MO-ASHA for several objectives (``mo_pruner``).
- ``trials.pause``: which paused trial continues, and which state goes first when the disk
  budget is spent (``promotion``, pure).

Below ``studyfile`` (which checks a study file's sampler and pruner against the real classes) and
``store``."""
