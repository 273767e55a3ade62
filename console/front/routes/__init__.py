"""The front's routes, one module per family (as vLLM lays out its OpenAI server): each has ``router(front)``, the
family's ``APIRouter`` answering for a :class:`~console.front.state.Front`; :func:`console.front.app.create_app`
wires them."""
