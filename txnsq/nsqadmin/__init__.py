"""
nsqadmin: the cluster web UI and its JSON API, on Klein.

- :mod:`txnsq.nsqadmin.options`: Go nsqadmin v1.3's flags and settings
- :mod:`txnsq.nsqadmin.http_client`: the HTTPS retry and TLS policy it adds
  to :class:`txnsq.http_client.GoHTTPClient`
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
- :mod:`txnsq.nsqadmin.markup`, :mod:`txnsq.nsqadmin.view_parts`,
  :mod:`txnsq.nsqadmin.views` and :mod:`txnsq.nsqadmin.pages`: the HTML
  pages and their routes
- :mod:`txnsq.nsqadmin.app`: the Klein app joining the API and the pages
- :mod:`txnsq.nsqadmin.service`: ``NSQAdminService`` and the ``nsqadmin`` script
- :mod:`txnsq.nsqadmin.tap`: ``twistd nsqadmin``

To embed one in a Twisted application::

    from txnsq.nsqadmin import NSQAdminService, parse_nsqadmin_args

    args = ["--lookupd-http-address=127.0.0.1:4161"]
    NSQAdminService(parse_nsqadmin_args(args)).setServiceParent(application)

``NSQAdminService``, ``NSQAdminOptions`` and ``parse_nsqadmin_args`` are
imported when first used.

Public API: the names in ``__all__``
(:class:`NSQAdminService <txnsq.nsqadmin.service.NSQAdminService>`,
:class:`NSQAdminOptions <txnsq.nsqadmin.options.NSQAdminOptions>`,
:func:`parse_nsqadmin_args <txnsq.nsqadmin.options.parse_nsqadmin_args>`),
the submodules :mod:`txnsq.nsqadmin.service` and
:mod:`txnsq.nsqadmin.options` that define them, and :mod:`txnsq.nsqadmin.app`
(the Klein resource alone, to mount under another site).  Every other
submodule is private.
"""

from txnsq.lazy import lazy_exports

__all__ = [
    "NSQAdminOptions",
    "NSQAdminService",
    "parse_nsqadmin_args",
]

_EXPORTS = {
    "NSQAdminOptions": "txnsq.nsqadmin.options",
    "NSQAdminService": "txnsq.nsqadmin.service",
    "parse_nsqadmin_args": "txnsq.nsqadmin.options",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
