"""The batch size of a trial: the pure search over a ``fits(size)`` predicate, out-of-memory
detection, the cache shared through the study, and the probe helpers trainers share."""
