"""What Optuna is asked: the search space and its sampling (``space``), the sampler and pruner
factory (``optuna_factory``), the fast exact Wilcoxon pruner (``wilcoxon``), successive halving and that
test together (``wilcoxon_halving``), TPE at a rung (``rung_tpe``), a GP
over (config, epoch) fitted on every curve (``mf_gp``), MO-ASHA (``mo_pruner``), feasibility
read back for a constrained sampler (``constraints``). Below ``studyfile`` (which checks a study
file's sampler and pruner against the real classes) and ``store``; orchestrator side only."""
