"""``python -m kiln.cli``: the same as the ``kiln`` script."""

from kiln.cli import main

main()
