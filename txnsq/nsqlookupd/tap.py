# -*- test-case-name: tests.test_nsqlookupd_tap -*-
"""
``twistd nsqlookupd``: the plugin's :class:`Options` read Go nsqlookupd's
flags as the ``nsqlookupd`` console script does (:mod:`txnsq.daemon`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from txnsq.cli import Flag
from txnsq.daemon import GoFlagsOptions, SettingsAlias
from txnsq.nsqlookupd.options import NSQLookupdOptions, nsqlookupd_flags

if TYPE_CHECKING:
    from txnsq.nsqlookupd.service import NSQLookupdService

__all__ = ["Options", "makeService"]


class Options(GoFlagsOptions[NSQLookupdOptions]):
    """nsqlookupd's flags for twistd; :attr:`lookupd_options` holds the settings."""

    program = "nsqlookupd"
    description = "Run an NSQ lookup daemon (nsqlookupd)."
    lookupd_options = SettingsAlias[NSQLookupdOptions]()

    def new_settings(self) -> NSQLookupdOptions:
        """Go nsqlookupd's defaults."""
        return NSQLookupdOptions()

    def flag_table(self) -> List[Flag]:
        """nsqlookupd's flags, in Go's order."""
        return nsqlookupd_flags()

    def build_service(self, settings: NSQLookupdOptions) -> "NSQLookupdService":
        """The :class:`NSQLookupdService <txnsq.nsqlookupd.service.NSQLookupdService>` for ``settings``."""
        from txnsq.nsqlookupd.service import NSQLookupdService

        return NSQLookupdService.fromOptions(settings)


def makeService(options: Options) -> "NSQLookupdService":
    """``twistd nsqlookupd``'s service: the console script's, logging left to twistd."""
    service: NSQLookupdService = options.make_service()
    return service
