"""``qaic-console eval``: accuracy between servers, precisions and compile settings (the command:
:mod:`console.commands.eval`)."""
