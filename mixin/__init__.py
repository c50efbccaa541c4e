"""kiln's monitoring mixin: alerts, recording rules and Grafana boards from one config.

``python -m mixin`` writes ``alerts/kiln.recording.yml``, ``alerts/kiln.rules.yml`` and
``dashboards/*.json`` from ``mixin.config.DEFAULT``; ``python -m mixin --check`` exits
1 when a checked-in file differs from what it generates (tests/ops runs it). To adapt
it to your Prometheus, build from your own Config (selectors, deployment labels,
thresholds and per-queue overrides, runbook base URL)::

    from mixin import config, build
    build.write(config.Config(deployment_labels=("cluster", "namespace", "job"),
                              runbook_url_base="https://docs.example.com/kiln/runbooks"),
                out_dir)
"""
