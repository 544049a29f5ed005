"""When a run stops launching trials, as pure rules over its outcomes: ``study.max_failures``
and the first trials failing alike (``rules``), ``study.plateau`` (``plateau``), and the
orchestrator's Ctrl-C and SIGTERM (``signals``). Below ``study``, whose loop applies them;
orchestrator side only."""
