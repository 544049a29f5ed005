"""What a user reads of a study: ``status``, ``best``, the HTML ``report``, the ``dashboard`` and the
live progress of ``run``. Never imports torch."""
