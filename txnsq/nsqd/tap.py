# -*- test-case-name: tests.test_tap -*-
"""
``twistd nsqd``: the command-line options of the nsqd twistd plugin.

twistd hands everything after ``nsqd`` to :class:`Options`, which reads it
with the same Go-style parser as the ``nsqd`` console script, so
``twistd -n nsqd --tcp-address=127.0.0.1:0 --mem-queue-size 5`` means what
``nsqd --tcp-address=127.0.0.1:0 --mem-queue-size 5`` means.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence

from twisted.python import usage

from txnsq import cli
from txnsq.nsqd.options import NSQDOptions, nsqd_flags

if TYPE_CHECKING:
    from txnsq.nsqd.service import NSQDService

__all__ = ["Options"]


class Options(usage.Options):
    """
    nsqd's flags for twistd, parsed the way Go's ``flag`` package does.

    After :meth:`parseOptions`, :attr:`nsqd_options` holds the parsed and
    validated :class:`~txnsq.nsqd.options.NSQDOptions`; the mapping itself
    holds the same values by attribute name, as usage.Options users expect.

    :ivar nsqd_options: the settings for the service.
    :ivar positional: arguments after the flags (ignored, as Go nsqd does).
    """

    synopsis = "[flags]"
    longdesc = (
        "Run an NSQ daemon (nsqd). The flags are Go nsqd's: -flag value, "
        "--flag=value, booleans bare or =true/false."
    )

    def __init__(self) -> None:
        usage.Options.__init__(self)
        self.nsqd_options: NSQDOptions = NSQDOptions()
        self.positional: List[str] = []

    def parseOptions(self, options: Optional[Sequence[str]] = None) -> None:
        """
        Parse nsqd's flags; ``--help`` prints the usage and exits 0.

        :raises usage.UsageError: with Go's message for a bad command line,
            or the reason settings are impossible (see
            :meth:`NSQDOptions.validate`).
        """
        if options is None:
            options = sys.argv[1:]
        try:
            parsed = cli.parse_flags(nsqd_flags(), options)
        except cli.HelpRequested:
            self.opt_help()
            return  # pragma: no cover - opt_help exits
        except cli.FlagError as error:
            raise usage.UsageError(error.message)
        settings = NSQDOptions()
        for attr, value in parsed.values.items():
            setattr(settings, attr, value)
        self.nsqd_options = settings
        self.positional = list(parsed.args)
        self.postOptions()

    def postOptions(self) -> None:
        """
        Validate the settings (unless only ``--version`` is wanted) and
        mirror them into the mapping.
        """
        if not self.nsqd_options.version:
            try:
                self.nsqd_options.validate()
            except ValueError as error:
                raise usage.UsageError(str(error))
        self.update(dataclasses.asdict(self.nsqd_options))

    def getUsage(self, width: Optional[int] = None) -> str:
        """The description and every flag in Go's ``PrintDefaults`` layout."""
        return "%s\n\n%s" % (self.longdesc, cli.format_defaults(nsqd_flags()))


def makeService(options: Options) -> "NSQDService":
    """
    The service ``twistd nsqd`` runs: the same :class:`NSQDService` as the
    console script, with console logging left to twistd.
    """
    from txnsq.cli import version_string
    from txnsq.nsqd.service import NSQDService

    if options.nsqd_options.version:
        sys.stdout.write(version_string("nsqd") + "\n")
        raise SystemExit(0)
    from txnsq.nsqd.metadata import DataPathError

    from twisted.internet import reactor

    from txnsq.nsqd.service import freeze_startup_objects

    service = NSQDService(options.nsqd_options)
    try:
        service.open_data()
    except DataPathError as error:
        raise SystemExit("nsqd: failed to instantiate nsqd - %s" % (error,))
    reactor.callWhenRunning(freeze_startup_objects)  # type: ignore[attr-defined]
    return service
