"""The typed study: the dataclasses a study file becomes (``model``: ``StudySpec`` and its
sections, stdlib only) and the metrics a trainer can report (``known_metrics``). Below every
package that reads a spec, the trial side included; the ``batch_size`` section
(``BatchSizeSpec``, which the payload carries) is :mod:`dvt_hpo.batch.spec`, with the rest of
the batch size. :mod:`dvt_hpo.studyfile` reads study.yaml into it."""
