"""The kiln web dashboard: see every job, requeue the failed ones, safely.

``create_app(database_url_or_app, ...)`` returns a Starlette ASGI app, to serve on its
own or mount inside your web application; ``serve(database_url, host, port, ...)``
runs it under uvicorn. It talks to kiln's Client only, never to a store or SQL.
Needs the ``web`` extra (starlette, uvicorn, jinja2, python-multipart).
See docs/dashboard.md.
"""

from kiln.web._app import create_app
from kiln.web._serve import serve

__all__ = ["create_app", "serve"]
