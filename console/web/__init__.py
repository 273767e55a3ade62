"""``qaic-console web``: a Gradio console in the browser (server control, stream and batch chat, speed).

``backend`` holds the server side (a tritonserver started here, or one reached by URL), ``chat`` the
per-message logic (requests through :mod:`console.clients`, live figures, rendering, export) and
``app`` the Gradio page. Importing this package does not import Gradio.
"""
