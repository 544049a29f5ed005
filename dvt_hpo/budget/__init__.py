"""A study's budgets, read from its storage so that every worker and every resume shares one
figure: which trials count towards ``study.n_trials`` (``trials``, pure), its ledger the loop asks
before each launch (``ledger``), and the compute spent against ``study.budget`` (``compute``:
GPU/CPU-hours, epochs, hours). Each answers and the loop applies. Below ``recovery``;
orchestrator side only."""
