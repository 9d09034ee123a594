"""Packaging for txnsq: NSQ, the realtime distributed messaging platform, on Twisted."""

import os
import platform
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.errors import BaseError, CCompilerError, PlatformError
except ImportError:  # setuptools < 59
    from distutils.errors import CCompilerError
    from distutils.errors import DistutilsError as BaseError
    from distutils.errors import DistutilsPlatformError as PlatformError


class OptionalBuildExt(build_ext):
    """
    Builds the compiled speed-ups where it can, and otherwise says so in
    one line: without a working C compiler (or Python's headers) txnsq
    installs and runs its pure-Python modules, which setuptools' own
    ``optional=True`` reports as one warning per module.
    """

    def run(self) -> None:
        self._failed = []
        self._why = ""
        try:
            build_ext.run(self)
        except PlatformError as error:
            # No compiler at all for this platform: nothing was attempted
            # (and nothing printed), so the line says why.
            self._failed = [(extension.name, error) for extension in self.extensions]
            self._why = ": %s" % (error,)
        self._report()

    def build_extension(self, ext: Extension) -> None:
        try:
            build_ext.build_extension(self, ext)
        except (CCompilerError, BaseError) as error:
            self._failed.append((ext.name, error))

    def _report(self) -> None:
        # A failing compiler's command and output are printed above this
        # line by setuptools; the line says what they mean.
        if not self._failed:
            return
        if len(self._failed) == len(self.extensions):
            line = "txnsq: C compiler unavailable, installing the pure-Python modules (slower)" + self._why
        else:
            line = "txnsq: could not compile %s, installing the pure-Python %s (slower)" % (
                ", ".join(name for name, _ in self._failed),
                "module" if len(self._failed) == 1 else "modules",
            )
        sys.stderr.write(line + "\n")


def _extensions() -> list:
    """
    The compiled speed-ups, beside the pure-Python modules they accelerate:
    CPython only (PyPy runs the pure Python), optional (a machine with no
    C compiler installs without them and runs the pure Python, see
    :class:`OptionalBuildExt`), and left out with
    ``TXNSQ_NO_EXTENSIONS=1``.
    """
    if platform.python_implementation() != "CPython" or os.environ.get("TXNSQ_NO_EXTENSIONS"):
        return []
    return [
        Extension(
            "txnsq.protocol._v2",
            ["txnsq/protocol/_v2.c"],
            optional=True,
        ),
        Extension(
            "txnsq.protocol._message",
            ["txnsq/protocol/_message.c"],
            optional=True,
        ),
        Extension(
            "txnsq.storage._log_format",
            ["txnsq/storage/_log_format.c"],
            optional=True,
        ),
        Extension(
            "txnsq.storage._diskqueue_format",
            ["txnsq/storage/_diskqueue_format.c"],
            optional=True,
        ),
    ]


with open("README.md", encoding="utf-8") as readme:
    LONG_DESCRIPTION = readme.read()

setup(
    name="txnsq",
    version="0.1.0",
    description="NSQ, the realtime distributed messaging platform, on Twisted",
    long_description=LONG_DESCRIPTION,
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["txnsq", "txnsq.*"]) + ["twisted.plugins"],
    package_data={
        "twisted.plugins": ["txnsq_services.py", "txnsq_storage.py"],
        "txnsq.nsqadmin": ["static/*.css", "static/*.js"],
    },
    include_package_data=True,
    # MANIFEST.in puts the C sources in the sdist; the wheel holds what
    # they compile to, not the sources.
    exclude_package_data={"": ["*.c"]},
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    zip_safe=False,
    install_requires=[
        "twisted[tls]>=22.10",
        "klein>=23.5",
        "python-snappy>=0.6",
        "service-identity>=21.1",
        "pyopenssl>=23.0",
        "zope.interface>=5.0",
        "treq>=23.11",
    ],
    extras_require={
        "test": ["mypy>=1.5", "mypy-zope>=1.0", "prometheus_client>=0.17", "hypothesis>=6.0"],
        # ISA-L's CRC32 for the retained log's record checksums.
        "speedups": ["isal>=1.0"],
        # bench/micro/cost_curves.py --plot draws its curves with matplotlib.
        "bench": ["matplotlib>=3.5"],
        # Spark 4's Python Data Source API moves rows through Arrow (and pandas).
        "spark": ["pyspark>=4.0", "pyarrow>=11.0", "pandas>=2.0,<3"],
    },
    entry_points={
        "console_scripts": [
            "nsqd = txnsq.nsqd.script:main",
            "nsqlookupd = txnsq.nsqlookupd.service:main",
            "nsqadmin = txnsq.nsqadmin.service:main",
            "nsq_tail = txnsq.tools.nsq_tail:main",
            "to_nsq = txnsq.tools.to_nsq:main",
            "nsq_to_file = txnsq.tools.nsq_to_file:main",
            "nsq_stat = txnsq.tools.nsq_stat:main",
            "nsq_to_nsq = txnsq.tools.nsq_to_nsq:main",
            "nsq_to_http = txnsq.tools.nsq_to_http:main",
            "nsq_log = txnsq.tools.nsq_log:main",
        ],
    },
    classifiers=[
        "Framework :: Twisted",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: Implementation :: CPython",
        "Programming Language :: Python :: Implementation :: PyPy",
        "Topic :: System :: Networking",
    ],
)
