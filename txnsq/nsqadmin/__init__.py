"""
nsqadmin: the cluster web UI and its JSON API, on Klein.

- :mod:`txnsq.nsqadmin.options`: Go nsqadmin v1.3's flags and settings
- :mod:`txnsq.nsqadmin.http_client`: treq requests with connect and request timeouts
- :mod:`txnsq.nsqadmin.clusterinfo`: what nsqlookupds and nsqds are asked,
  concurrently, each failure kept with its node (Go's ``internal/clusterinfo``)
- :mod:`txnsq.nsqadmin.stats`: nsqd ``/stats`` documents summed into Go's
  ``TopicStats`` and ``ChannelStats`` shapes
- :mod:`txnsq.nsqadmin.history`: depth and message counts sampled over the
  last minutes, for rates and charts
- :mod:`txnsq.nsqadmin.acl`: who may act (``--admin-user``, ``--acl-http-header``)
- :mod:`txnsq.nsqadmin.notify`: admin action notifications
- :mod:`txnsq.nsqadmin.markup` and :mod:`txnsq.nsqadmin.views`: the HTML pages
- :mod:`txnsq.nsqadmin.app`: the Klein app: ``/api/*`` as Go's, pages, assets
- :mod:`txnsq.nsqadmin.service`: ``NSQAdminService`` and the ``nsqadmin`` script
- :mod:`txnsq.nsqadmin.tap`: ``twistd nsqadmin``
"""

__all__ = [
    "acl",
    "app",
    "clusterinfo",
    "history",
    "http_client",
    "markup",
    "notify",
    "options",
    "service",
    "stats",
    "tap",
    "views",
]
