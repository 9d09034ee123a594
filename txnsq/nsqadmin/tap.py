# -*- test-case-name: tests.test_nsqadmin_options -*-
"""
``twistd nsqadmin``: the nsqadmin twistd plugin.  ``twistd -n nsqadmin
--http-address=127.0.0.1:0`` means what ``nsqadmin --http-address=127.0.0.1:0``
means: :class:`Options` is :mod:`txnsq.daemon`'s Go-style parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from txnsq.cli import Flag
from txnsq.daemon import GoFlagsOptions, SettingsAlias
from txnsq.nsqadmin.options import NSQAdminOptions, nsqadmin_flags

if TYPE_CHECKING:
    from txnsq.nsqadmin.service import NSQAdminService

__all__ = ["Options", "makeService"]


class Options(GoFlagsOptions[NSQAdminOptions]):
    """
    nsqadmin's flags for twistd, parsed the way Go's ``flag`` package does;
    the settings are :attr:`admin_options`.
    """

    program = "nsqadmin"
    description = "Run nsqadmin, the NSQ cluster web UI and admin API."
    admin_options = SettingsAlias[NSQAdminOptions]()

    def new_settings(self) -> NSQAdminOptions:
        """The settings of an nsqadmin given no flags."""
        return NSQAdminOptions()

    def flag_table(self) -> List[Flag]:
        """Go nsqadmin's flag table."""
        return nsqadmin_flags()

    def build_service(self, settings: NSQAdminOptions) -> "NSQAdminService":
        """An :class:`NSQAdminService <txnsq.nsqadmin.service.NSQAdminService>` on the global reactor."""
        from txnsq.nsqadmin.service import NSQAdminService

        return NSQAdminService.fromOptions(settings)


def makeService(options: Options) -> "NSQAdminService":
    """
    What ``twistd nsqadmin`` runs: the console script's
    :class:`NSQAdminService <txnsq.nsqadmin.service.NSQAdminService>`, console logging left
    to twistd.
    """
    service: NSQAdminService = options.make_service()
    return service
