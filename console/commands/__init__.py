"""The ``qaic-console`` commands (click) and the options they share (:mod:`.options`)."""
