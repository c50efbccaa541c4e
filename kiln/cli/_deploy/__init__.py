"""``kiln check-deploy``: the deploy files it reads, one module per kind of file."""
