"""
Browser tests of nsqadmin: headless Chromium (Debian's ``chromium``, driven
by Playwright's Python package) against real txnsq nsqd, nsqlookupd and
nsqadmin processes on 127.0.0.1.  Run by ``tox -e browser``, whose
``commands_pre`` installs Chromium when it is missing
(:mod:`tests_browser.ensure_chromium`).
"""
