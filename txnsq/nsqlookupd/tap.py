# -*- test-case-name: tests.test_nsqlookupd_tap -*-
"""
``twistd nsqlookupd``: the command-line options of the nsqlookupd twistd
plugin.

twistd hands everything after ``nsqlookupd`` to :class:`Options`, which
reads it with the same Go-style parser as the ``nsqlookupd`` console
script, so ``twistd -n nsqlookupd --tcp-address=127.0.0.1:0`` means what
``nsqlookupd --tcp-address=127.0.0.1:0`` means.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence

from twisted.python import usage

from txnsq import cli
from txnsq.nsqlookupd.options import NSQLookupdOptions, nsqlookupd_flags

if TYPE_CHECKING:
    from txnsq.nsqlookupd.service import NSQLookupdService

__all__ = ["Options", "makeService"]


class Options(usage.Options):
    """
    nsqlookupd's flags for twistd, parsed the way Go's ``flag`` package does.

    After :meth:`parseOptions`, :attr:`lookupd_options` holds the parsed
    and validated settings; the mapping itself holds the same values by
    attribute name, as usage.Options users expect.

    :ivar lookupd_options: the settings for the service.
    :ivar positional: arguments after the flags (ignored, as Go does).
    """

    synopsis = "[flags]"
    longdesc = (
        "Run an NSQ lookup daemon (nsqlookupd). The flags are Go nsqlookupd's: "
        "-flag value, --flag=value, booleans bare or =true/false."
    )

    def __init__(self) -> None:
        usage.Options.__init__(self)
        self.lookupd_options: NSQLookupdOptions = NSQLookupdOptions()
        self.positional: List[str] = []

    def parseOptions(self, options: Optional[Sequence[str]] = None) -> None:
        """
        Parse nsqlookupd's flags; ``--help`` prints the usage and exits 0.

        :raises usage.UsageError: with Go's message for a bad command line,
            or the reason the settings are impossible.
        """
        if options is None:
            options = sys.argv[1:]
        try:
            parsed = cli.parse_flags(nsqlookupd_flags(), options)
        except cli.HelpRequested:
            self.opt_help()
            return  # pragma: no cover - opt_help exits
        except cli.FlagError as error:
            raise usage.UsageError(error.message)
        settings = NSQLookupdOptions()
        for attr, value in parsed.values.items():
            setattr(settings, attr, value)
        self.lookupd_options = settings
        self.positional = list(parsed.args)
        self.postOptions()

    def postOptions(self) -> None:
        """
        Validate the settings (unless only ``--version`` is wanted) and
        mirror them into the mapping.
        """
        if not self.lookupd_options.version:
            try:
                self.lookupd_options.validate()
            except ValueError as error:
                raise usage.UsageError(str(error))
        self.update(dataclasses.asdict(self.lookupd_options))

    def getUsage(self, width: Optional[int] = None) -> str:
        """The description and every flag in Go's ``PrintDefaults`` layout."""
        return "%s\n\n%s" % (self.longdesc, cli.format_defaults(nsqlookupd_flags()))


def makeService(options: Options) -> "NSQLookupdService":
    """
    The service ``twistd nsqlookupd`` runs: the same
    :class:`~txnsq.nsqlookupd.service.NSQLookupdService` as the console
    script, with console logging left to twistd.
    """
    from txnsq.cli import version_string
    from txnsq.nsqlookupd.service import NSQLookupdService

    if options.lookupd_options.version:
        sys.stdout.write(version_string("nsqlookupd") + "\n")
        raise SystemExit(0)
    return NSQLookupdService(options.lookupd_options)
