"""Optuna, where dvt-hpo leans on more than its public API: every private name in one module
(``private``), tested on the installed release, so that a new Optuna release is checked in one
place. Orchestrator side only (the trial process never imports optuna)."""
