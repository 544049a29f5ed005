"""The machine's devices and how trials share them: device slots from ``trials.devices``
(``slots``), a GPU share under ``trials.per_gpu`` as arithmetic the orchestrator puts in the
payload (``gpu_share``, stdlib) and as the cap the trial process applies (``gpu_cap``, imports
torch when called). Both sides use it, below ``wire``."""
