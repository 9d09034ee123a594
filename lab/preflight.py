"""What the lab needs on the machine, checked before anything is made."""

from __future__ import annotations

import os
import shutil
from typing import List

from lab.errors import LabError

__all__ = ["check", "TOOLS"]

#: Commands every scenario needs, and the Debian package of each.
TOOLS = {"ip": "iproute2", "iptables": "iptables"}


def check(extra: List[str] = ()) -> None:  # type: ignore[assignment]
    """
    :raises LabError: not root, or a command missing (naming it and its
        Debian package: ``.ci/ensure_lab.sh`` installs them).
    """
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces and iptables); run it as root")
    for tool in list(TOOLS) + list(extra):
        if shutil.which(tool) is None:
            package = TOOLS.get(tool, tool)
            raise LabError("missing %s (Debian package %s; bash .ci/ensure_lab.sh installs it)" % (tool, package))
