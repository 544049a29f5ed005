"""What runs inside the trial process: its main (``python -m dvt_hpo.trial PAYLOAD.json``) and
the context an entry point ``run(config, ctx)`` receives."""
