"""Prometheus metrics: the text exposition format and the ``/metrics`` HTTP endpoint.

The counters themselves live beside the servers they measure (``broker/metrics.py``,
``namesrv/metrics.py``, the store's own in ``store/``); this package is what they share::

    exposition.py   Family, Histogram and render(): the text format (version 0.0.4)
    http.py         MetricsServer: GET /metrics on the serving process's event loop

It imports nothing else of rocketq and nothing outside the standard library: serving metrics
needs no extra package (prometheus_client is used by the tests only, to check the format).
"""
