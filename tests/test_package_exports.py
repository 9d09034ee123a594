"""
The daemons' packages export their services, options and flag parsers
(``from txnsq.nsqd import NSQDService``), imported when first used; every
package declares which of its submodules are public, and pydoctor's
privacy list agrees; names that moved still import from where they were,
with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from tests.public_api import declared_submodules, defined_in_init, packages, public_modules, pydoctor_privacy


class ExportTests(SynchronousTestCase):
    """Each package's __all__ names resolve to the objects of their modules."""

    def test_nsqd(self) -> None:
        """txnsq.nsqd exports NSQDService, NSQDOptions and parse_nsqd_args."""
        import txnsq.nsqd
        from txnsq.nsqd.flags import parse_nsqd_args
        from txnsq.nsqd.options import NSQDOptions
        from txnsq.nsqd.service import NSQDService

        self.assertIs(txnsq.nsqd.NSQDService, NSQDService)
        self.assertIs(txnsq.nsqd.NSQDOptions, NSQDOptions)
        self.assertIs(txnsq.nsqd.parse_nsqd_args, parse_nsqd_args)
        self.assertEqual(sorted(txnsq.nsqd.__all__), ["NSQDOptions", "NSQDService", "parse_nsqd_args"])

    def test_nsqlookupd(self) -> None:
        """txnsq.nsqlookupd exports NSQLookupdService, NSQLookupdOptions and parse_nsqlookupd_args."""
        import txnsq.nsqlookupd
        from txnsq.nsqlookupd.options import NSQLookupdOptions, parse_nsqlookupd_args
        from txnsq.nsqlookupd.service import NSQLookupdService

        self.assertIs(txnsq.nsqlookupd.NSQLookupdService, NSQLookupdService)
        self.assertIs(txnsq.nsqlookupd.NSQLookupdOptions, NSQLookupdOptions)
        self.assertIs(txnsq.nsqlookupd.parse_nsqlookupd_args, parse_nsqlookupd_args)

    def test_nsqadmin(self) -> None:
        """txnsq.nsqadmin exports NSQAdminService, NSQAdminOptions and parse_nsqadmin_args."""
        import txnsq.nsqadmin
        from txnsq.nsqadmin.options import NSQAdminOptions, parse_nsqadmin_args
        from txnsq.nsqadmin.service import NSQAdminService

        self.assertIs(txnsq.nsqadmin.NSQAdminService, NSQAdminService)
        self.assertIs(txnsq.nsqadmin.NSQAdminOptions, NSQAdminOptions)
        self.assertIs(txnsq.nsqadmin.parse_nsqadmin_args, parse_nsqadmin_args)

    def test_unknown_name(self) -> None:
        """Any other name is an AttributeError, as for a plain module."""
        import txnsq.nsqd

        self.assertRaises(AttributeError, getattr, txnsq.nsqd, "NoSuchThing")

    def test_core_import_stays_light(self) -> None:
        """Importing the broker core does not import the HTTP framework (start time)."""
        code = (
            "import sys, txnsq.nsqd.broker; "
            "print('klein' in sys.modules, 'txnsq.nsqd.service' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
        self.assertEqual(out.stdout.split(), ["False", "False"])


class DeclaredAPITests(SynchronousTestCase):
    """
    Each package says which of its submodules are public; what is public
    exists, and pydoctor.ini marks the same things public.
    """

    def test_every_package_declares(self) -> None:
        """Every package's docstring has a paragraph that starts "Public API:"."""
        self.assertEqual([p for p in packages() if declared_submodules(p) is None], [])

    def test_declared_submodules_exist(self) -> None:
        """A package declares public only submodules of its own that exist."""
        wrong = []
        for package in packages():
            for module in sorted(declared_submodules(package) or ()):
                if module.rpartition(".")[0] != package or importlib.util.find_spec(module) is None:
                    wrong.append(module)
        self.assertEqual(wrong, [])

    def test_private_packages_declare_nothing(self) -> None:
        """A package that is not public declares no public submodule."""
        public = public_modules()
        declaring = [p for p in packages() if p not in public and declared_submodules(p)]
        self.assertEqual(declaring, [])

    def test_public_names_exist(self) -> None:
        """Every name in a public module's __all__ exists (lazy exports too), and none is a private submodule."""
        public = public_modules()
        missing = []
        private = []
        for name in sorted(public):
            module = importlib.import_module(name)
            for member in getattr(module, "__all__", ()):
                dotted = name + "." + member
                if not hasattr(module, member):
                    missing.append(dotted)
                elif hasattr(module, "__path__") and dotted not in public and importlib.util.find_spec(dotted):
                    private.append(dotted)
        self.assertEqual(missing, [], "names that do not exist")
        self.assertEqual(private, [], "private submodules in a public __all__")

    def test_pydoctor_privacy(self) -> None:
        """
        pydoctor.ini marks public exactly the declared modules and the
        public names packages define themselves, and marks everything else
        directly under each public package private.
        """
        public = public_modules()
        public_packages = sorted(p for p in packages() if p in public)
        expected = set(public) - {"txnsq"}
        for package in public_packages:
            exported = getattr(importlib.import_module(package), "__all__", ())
            expected.update(package + "." + name for name in exported if name in defined_in_init(package))
        privacy = pydoctor_privacy()
        self.assertEqual(sorted(privacy["PUBLIC"]), sorted(expected))
        self.assertEqual(sorted(privacy["PRIVATE"]), sorted(p + ".*" for p in public_packages))


#: Names txnsq.nsqd.http re-exported after they moved: their new homes.
MOVED_FROM_NSQD_HTTP = {
    "APIError": "txnsq.protocol.http_params",
    "CONFIG_OPTIONS": "txnsq.nsqd.http_config",
    "go_json": "txnsq.protocol.go_json",
    "parse_mpub_binary": "txnsq.protocol.http_params",
    "parse_mpub_lines": "txnsq.protocol.http_params",
    "parse_query": "txnsq.protocol.http_params",
}


class MovedNamesTests(SynchronousTestCase):
    """Old import paths keep working and say that they are deprecated."""

    def test_nsqd_http_moved_names(self) -> None:
        """Each name that moved out of txnsq.nsqd.http is still there, the same object, with a DeprecationWarning naming its new home."""
        from txnsq.nsqd import http

        for name, home in sorted(MOVED_FROM_NSQD_HTTP.items()):
            self.assertIs(getattr(http, name), getattr(importlib.import_module(home), name))
            warnings = self.flushWarnings([self.test_nsqd_http_moved_names])
            self.assertEqual(len(warnings), 1, name)
            self.assertIs(warnings[0]["category"], DeprecationWarning)
            self.assertEqual(
                warnings[0]["message"],
                "txnsq.nsqd.http.%s was deprecated in txnsq 0.1.0: use %s.%s instead" % (name, home, name),
            )

    def test_nsqd_http_from_import(self) -> None:
        """``from txnsq.nsqd.http import APIError`` works and warns."""
        from txnsq.nsqd.http import APIError
        from txnsq.protocol.http_params import APIError as moved

        self.assertIs(APIError, moved)
        warnings = self.flushWarnings([self.test_nsqd_http_from_import])
        self.assertEqual([w["category"] for w in warnings], [DeprecationWarning])

    def test_nsqd_http_own_names_quiet(self) -> None:
        """The module's own names (NSQDHTTPAPI, ROUTES) import with no warning."""
        from txnsq.nsqd.http import ROUTES, NSQDHTTPAPI

        self.assertTrue(ROUTES)
        self.assertTrue(NSQDHTTPAPI)
        self.assertEqual(self.flushWarnings(), [])
