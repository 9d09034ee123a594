# -*- test-case-name: tests.test_nsqadmin_service -*-
"""
``twistd nsqadmin``: the command-line options of the nsqadmin twistd
plugin.

twistd hands everything after ``nsqadmin`` to :class:`Options`, which
reads it with the same Go-style parser as the ``nsqadmin`` console
script, so ``twistd -n nsqadmin --http-address=127.0.0.1:0`` means what
``nsqadmin --http-address=127.0.0.1:0`` means.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence

from twisted.python import usage

from txnsq import cli
from txnsq.nsqadmin.options import NSQAdminOptions, nsqadmin_flags

if TYPE_CHECKING:
    from txnsq.nsqadmin.service import NSQAdminService

__all__ = ["Options", "makeService"]


class Options(usage.Options):
    """
    nsqadmin's flags for twistd, parsed the way Go's ``flag`` package does.

    After :meth:`parseOptions`, :attr:`admin_options` holds the parsed
    and validated settings; the mapping itself holds the same values by
    attribute name, as usage.Options users expect.

    :ivar admin_options: the settings for the service.
    :ivar positional: arguments after the flags (ignored, as Go does).
    """

    synopsis = "[flags]"
    longdesc = (
        "Run nsqadmin, the NSQ cluster web UI and admin API. The flags are Go nsqadmin's: "
        "-flag value, --flag=value, booleans bare or =true/false."
    )

    def __init__(self) -> None:
        usage.Options.__init__(self)
        self.admin_options: NSQAdminOptions = NSQAdminOptions()
        self.positional: List[str] = []

    def parseOptions(self, options: Optional[Sequence[str]] = None) -> None:
        """
        Parse nsqadmin's flags; ``--help`` prints the usage and exits 0.

        :raises usage.UsageError: with Go's message for a bad command line,
            or the reason the settings are impossible.
        """
        if options is None:
            options = sys.argv[1:]
        try:
            parsed = cli.parse_flags(nsqadmin_flags(), options)
        except cli.HelpRequested:
            self.opt_help()
            return  # pragma: no cover - opt_help exits
        except cli.FlagError as error:
            raise usage.UsageError(error.message)
        settings = NSQAdminOptions()
        for attr, value in parsed.values.items():
            setattr(settings, attr, value)
        self.admin_options = settings
        self.positional = list(parsed.args)
        self.postOptions()

    def postOptions(self) -> None:
        """
        Validate the settings (unless only ``--version`` is wanted) and
        mirror them into the mapping.
        """
        if not self.admin_options.version:
            try:
                self.admin_options.validate()
            except ValueError as error:
                raise usage.UsageError(str(error))
        self.update(dataclasses.asdict(self.admin_options))

    def getUsage(self, width: Optional[int] = None) -> str:
        """The description and every flag in Go's ``PrintDefaults`` layout."""
        return "%s\n\n%s" % (self.longdesc, cli.format_defaults(nsqadmin_flags()))


def makeService(options: Options) -> "NSQAdminService":
    """
    The service ``twistd nsqadmin`` runs: the same
    :class:`~txnsq.nsqadmin.service.NSQAdminService` as the console
    script, with console logging left to twistd.
    """
    from txnsq.cli import version_string
    from txnsq.nsqadmin.service import NSQAdminService

    if options.admin_options.version:
        sys.stdout.write(version_string("nsqadmin") + "\n")
        raise SystemExit(0)
    return NSQAdminService(options.admin_options)
