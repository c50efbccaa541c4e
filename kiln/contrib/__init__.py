"""kiln inside the web frameworks people write applications in.

``kiln.contrib.starlette`` and ``kiln.contrib.fastapi``: a lifespan that opens and
closes the app's async client, and the dashboard behind the host application's own
authentication. ``kiln.contrib.django``: a Django app (settings, ``kiln_worker`` and
``kiln_migrate`` commands, the dashboard behind Django's auth). Each module needs its
framework installed; importing ``kiln`` never imports them.
"""
