"""The web console: ``rocketq dashboard --namesrv host:port --port 8080``.

Modules::

    http.py     a small HTTP/1.1 server on ``asyncio.start_server`` with a path router
    admin.py    DashboardAdmin: AsyncAdmin plus the few broker requests the pages need
    api.py      the JSON API (``/api/...``): every read and every change goes through the admin
                protocol to the name servers and brokers, never to their files
    sampler.py  topic TPS over the last hour, sampled from the topics' max offsets
    static/     the pages (HTML, CSS and vanilla JS, no external assets)

See docs/console.md.
"""

from __future__ import annotations

from rocketq.dashboard.api import DashboardApp, run_dashboard, start_dashboard

__all__ = ["DashboardApp", "run_dashboard", "start_dashboard"]
