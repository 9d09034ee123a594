# -*- test-case-name: tests.test_tools_filename -*-
"""
The strftime subset Go's ``nsq_to_file`` understands for ``<DATETIME>``.

Go's ``nsq_to_file`` (``apps/nsq_to_file/strftime.go``) translates a
strftime format into a Go time layout with a fixed table; a directive
outside the table is kept as it is (``%j`` stays ``%j``).  Names of months
and days are English whatever the locale, as in Go.
"""

from __future__ import annotations

import time
from typing import Callable, Dict

__all__ = ["strftime"]

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _hour12(t: time.struct_time) -> str:
    hour = t.tm_hour % 12
    return "%02d" % (hour if hour else 12,)


def _numeric_zone(t: time.struct_time) -> str:
    offset = t.tm_gmtoff or 0
    sign = "-" if offset < 0 else "+"
    offset = abs(offset) // 60
    return "%s%02d%02d" % (sign, offset // 60, offset % 60)


def _zone_name(t: time.struct_time) -> str:
    name = t.tm_zone
    if name:
        return name
    # Go prints the numeric offset when a zone has no abbreviation.
    return _numeric_zone(t)[:3]


_DIRECTIVES: Dict[str, Callable[[time.struct_time], str]] = {
    "B": lambda t: _MONTHS[t.tm_mon - 1],
    "b": lambda t: _MONTHS[t.tm_mon - 1][:3],
    "m": lambda t: "%02d" % (t.tm_mon,),
    "A": lambda t: _DAYS[t.tm_wday],
    "a": lambda t: _DAYS[t.tm_wday][:3],
    "d": lambda t: "%02d" % (t.tm_mday,),
    "H": lambda t: "%02d" % (t.tm_hour,),
    "I": _hour12,
    "M": lambda t: "%02d" % (t.tm_min,),
    "S": lambda t: "%02d" % (t.tm_sec,),
    "Y": lambda t: "%04d" % (t.tm_year,),
    "y": lambda t: "%02d" % (t.tm_year % 100,),
    "p": lambda t: "PM" if t.tm_hour >= 12 else "AM",
    "Z": _zone_name,
    "z": _numeric_zone,
    "%": lambda t: "%",
}


def strftime(format: str, when: float) -> str:
    """
    Format the local time of ``when`` (seconds since the epoch) with Go
    ``nsq_to_file``'s directives: ``%Y %y %m %b %B %d %a %A %H %I %M %S %p
    %Z %z %%``.
    """
    moment = time.localtime(when)
    out = []
    i = 0
    length = len(format)
    while i < length:
        char = format[i]
        if char == "%" and i + 1 < length:
            directive = _DIRECTIVES.get(format[i + 1])
            if directive is not None:
                out.append(directive(moment))
                i += 2
                continue
        out.append(char)
        i += 1
    return "".join(out)
