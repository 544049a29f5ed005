"""Processes of the orchestrator side: how a trial process is launched, its process tree, the warm
template, bounded logs, the import rule for entry points, device slots. Stdlib only (never torch)."""
