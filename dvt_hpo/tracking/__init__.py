"""Experiment trackers fed by the study loop's events (``dvt_hpo.results.events``).

Each tracker is an observer in a module of its own, imported only when the study file turns it
on, so its package stays an optional extra.
"""
