"""The UI-free core every front end uses.

``controls`` (the controls table as CLI options and form values), ``request`` (settings -> model
info -> prompts -> call), ``turns`` (events folded into turns, the history rule, per-prompt
figures), ``transcript`` (export), ``template`` (chat templates) and ``controller`` (the server a
console starts or connects to).
"""
