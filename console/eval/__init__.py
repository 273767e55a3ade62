"""``qaic-console eval``: accuracy between servers, precisions and compile settings (see :mod:`console.eval.cli`)."""
