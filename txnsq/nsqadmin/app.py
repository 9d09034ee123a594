# -*- test-case-name: tests.test_nsqadmin_api,tests.test_nsqadmin_pages -*-
"""
The nsqadmin Klein app: the JSON API (:mod:`txnsq.nsqadmin.api`), the pages
(:mod:`txnsq.nsqadmin.pages`) and their assets, on one route table.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import IResource

from txnsq.nsqadmin.api import APIHandlers
from txnsq.nsqadmin.clusterinfo import ClusterInfo
from txnsq.nsqadmin.history import History
from txnsq.nsqadmin.notify import Notifier
from txnsq.nsqadmin.options import NSQAdminOptions
from txnsq.nsqadmin.pages import PageHandlers

__all__ = ["NSQAdminApp", "admin_resource"]


class NSQAdminApp(APIHandlers, PageHandlers):
    """
    One nsqadmin's HTTP endpoints.

    :param options: the settings (addresses, admin users, ACL header).
    :param cluster: asks the nodes.
    :param clock: times requests, stamps samples and notifications.
    :param notifier: sends admin action notifications (none when omitted).
    """


def admin_resource(
    options: NSQAdminOptions,
    cluster: ClusterInfo,
    clock: IReactorTime,
    notifier: Optional[Notifier] = None,
    history: Optional[History] = None,
) -> IResource:
    """The resource serving nsqadmin's API and pages."""
    resource: Any = NSQAdminApp(options, cluster, clock, notifier, history).app.resource()
    return resource  # type: ignore[no-any-return]
