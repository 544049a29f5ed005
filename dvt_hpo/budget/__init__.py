"""A study's budgets, read from its storage so that every worker and every resume shares one
figure: which trials count towards ``study.n_trials`` (``trials``, pure) and the compute spent
against ``study.budget`` (``compute``: GPU/CPU-hours, epochs, hours). Below ``recovery`` (its
ledger counts trials by ``trials``'s rule); orchestrator side only."""
