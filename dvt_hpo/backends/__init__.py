"""Trainer backends: entry points that tune other libraries' trainings.

Each backend is a subpackage imported only by the trial process (through
``trainer.entrypoint``) and by ``dvt-hpo validate`` for its schema; the core never imports
one. A backend's package imports neither torch nor its library at import time.
"""
