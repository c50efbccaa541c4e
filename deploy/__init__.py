"""deploy/: Kubernetes, compose and systemd files for kiln, and the generator of the
artifacts derived from alerts/ and dashboards/ (``python -m deploy.generate``)."""
