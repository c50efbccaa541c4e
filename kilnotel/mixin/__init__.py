"""kiln's monitoring mixin: alerts, recording rules and Grafana boards from one config.

Installed with kilnotel (``pip install 'kiln-jobs[otel]'``)::

    python -m kilnotel.mixin --config kiln-mixin.yml --out monitoring/

writes ``monitoring/alerts/kiln.recording.yml``, ``monitoring/alerts/kiln.rules.yml`` and
``monitoring/dashboards/*.json`` from the Config the file describes (every field of
``kilnotel.mixin.config.Config``: selectors, deployment labels, thresholds and per-queue
overrides, SLOs, and the routing hooks: extra alert labels and annotations, the runbook
URL pattern, the dashboard URL and links); ``--check`` exits 1 when a file there differs
from what it generates. From Python::

    from kilnotel.mixin import build, config
    build.write(config.Config(alert_extra_labels={"team": "payments"},
                              runbook_url_pattern="https://wiki.example.com/kiln/{alert}"),
                out_dir)

kiln's repository checks in the output of the defaults (``python -m mixin``).
"""
