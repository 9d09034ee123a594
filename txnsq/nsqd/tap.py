# -*- test-case-name: tests.test_tap -*-
"""
``twistd nsqd``: the nsqd twistd plugin's :class:`Options`, read by the same
Go-style parser as the ``nsqd`` console script (:mod:`txnsq.daemon`), so
``twistd -n nsqd --tcp-address=127.0.0.1:0 --mem-queue-size 5`` means what
``nsqd --tcp-address=127.0.0.1:0 --mem-queue-size 5`` means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from txnsq.cli import Flag
from txnsq.daemon import GoFlagsOptions, SettingsAlias
from txnsq.nsqd.flags import nsqd_flags
from txnsq.nsqd.options import NSQDOptions

if TYPE_CHECKING:
    from txnsq.nsqd.service import NSQDService

__all__ = ["Options"]


class Options(GoFlagsOptions[NSQDOptions]):
    """
    nsqd's flags for twistd; after ``parseOptions``, :attr:`nsqd_options`
    holds the validated :class:`NSQDOptions <txnsq.nsqd.options.NSQDOptions>`.
    """

    program = "nsqd"
    description = "Run an NSQ daemon (nsqd)."
    nsqd_options = SettingsAlias[NSQDOptions]()

    def new_settings(self) -> NSQDOptions:
        """Go nsqd's defaults."""
        return NSQDOptions()

    def flag_table(self) -> List[Flag]:
        """nsqd's flags, in Go's order."""
        return nsqd_flags()

    def build_service(self, settings: NSQDOptions) -> "NSQDService":
        """
        The :class:`NSQDService` for ``settings``, its data directory open;
        the process's startup objects are frozen once the reactor runs.

        :raises SystemExit: with Go's message when the data path cannot be
            used.
        """
        from twisted.internet import reactor

        from txnsq.nsqd.data_path_lock import DataPathError
        from txnsq.nsqd.service import NSQDService, freeze_startup_objects

        service = NSQDService.fromOptions(settings)
        try:
            service.open_data()
        except DataPathError as error:
            raise SystemExit("nsqd: failed to instantiate nsqd - %s" % (error,))
        reactor.callWhenRunning(freeze_startup_objects)  # type: ignore[attr-defined]
        return service


def makeService(options: Options) -> "NSQDService":
    """
    The service ``twistd nsqd`` runs: the same :class:`NSQDService` as the
    console script, with console logging left to twistd.
    """
    service: NSQDService = options.make_service()
    return service
