"""``qaic-console web``: a Gradio console in the browser (server control, stream and batch chat, speed).

Built on the UI-free core (:mod:`console.core`): ``app`` is the page's layout and wiring,
``handlers`` what its events do, ``views`` what it shows (pure functions), ``command`` the CLI.
Importing this package does not import Gradio.
"""
