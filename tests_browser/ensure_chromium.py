"""
Make sure Debian's Chromium is installed for the browser tests.

``python -m tests_browser.ensure_chromium`` does nothing when
``/usr/bin/chromium`` exists; otherwise it says so and installs Debian's
``chromium`` package with apt-get (as root, or through sudo when there is
one).  Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import List

CHROMIUM = "/usr/bin/chromium"


def _apt(arguments: List[str]) -> List[str]:
    command = ["apt-get"] + arguments
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise SystemExit(
                "%s is missing and installing it needs root: run "
                "'apt-get install -y chromium' as root" % (CHROMIUM,)
            )
        command = ["sudo", "-n"] + command
    return command


def main() -> None:
    """Install Chromium with apt-get when it is not there."""
    if os.path.exists(CHROMIUM):
        print("ensure_chromium: %s is installed" % (CHROMIUM,))
        return
    if shutil.which("apt-get") is None:
        raise SystemExit("%s is missing and there is no apt-get to install it" % (CHROMIUM,))
    print("ensure_chromium: %s is missing; installing Debian's chromium with apt-get" % (CHROMIUM,))
    sys.stdout.flush()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.check_call(_apt(["update"]), env=env)
    subprocess.check_call(_apt(["install", "-y", "chromium"]), env=env)
    if not os.path.exists(CHROMIUM):
        raise SystemExit("apt-get installed chromium but %s is still missing" % (CHROMIUM,))


if __name__ == "__main__":
    main()
