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
- :mod:`txnsq.nsqadmin.actions`: who may act (``--admin-user``,
  ``--acl-http-header``) and the admin actions over the cluster
- :mod:`txnsq.nsqadmin.notify`: admin action notifications
- :mod:`txnsq.nsqadmin.base`: the route table and asynchronous dispatch
  the API and the pages share
- :mod:`txnsq.nsqadmin.api`: ``/api/*`` as Go nsqadmin's
- :mod:`txnsq.nsqadmin.markup`, :mod:`txnsq.nsqadmin.views` and
  :mod:`txnsq.nsqadmin.pages`: the HTML pages and their routes
- :mod:`txnsq.nsqadmin.app`: the Klein app joining the API and the pages
- :mod:`txnsq.nsqadmin.service`: ``NSQAdminService`` and the ``nsqadmin`` script
- :mod:`txnsq.nsqadmin.tap`: ``twistd nsqadmin``
"""

__all__ = [
    "actions",
    "api",
    "app",
    "base",
    "clusterinfo",
    "history",
    "http_client",
    "markup",
    "notify",
    "options",
    "pages",
    "service",
    "stats",
    "tap",
    "views",
]
