"""
The release check, run by ``tox -e release``: does what we would publish
install and serve?

1. ``python -m build`` makes the sdist, then the wheel from the unpacked
   sdist (so a file missing from the sdist breaks the wheel here, not on
   a user's machine); ``twine check --strict`` reads their metadata.
2. The sdist holds the C sources, nsqadmin's static files, the plugins and
   the docs, and none of the repository-only trees; the wheel holds the
   compiled speed-ups and the plugins, and no C source.
3. The wheel is installed in a fresh virtualenv, run from a temporary
   directory with no source tree on ``sys.path``: ``nsqd --version`` has
   the line gnsq's harness accepts and says ``-compiled``, and an ``nsqd``
   on ``127.0.0.1:0`` takes a ``PUB`` and delivers it to a ``SUB``.
4. ``pip install --no-binary txnsq SDIST`` with ``CC=false`` (no working C
   compiler) installs in another fresh virtualenv, saying so in exactly
   one line, and that nsqd says ``-pure`` and serves too.

Standard library only, so that it runs in any environment that has
``build`` and ``twine``::

    python .ci/release_check.py WORKDIR
"""

from __future__ import annotations

import glob
import os
import platform
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Environment variables the installs and daemons run without.
_UNSET = [
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "VIRTUAL_ENV",
    "TXNSQ_NO_EXTENSIONS",
    "__PYVENV_LAUNCHER__",
]

#: The line ``pip install`` prints when no C compiler works (setup.py).
FALLBACK_LINE = "txnsq: C compiler unavailable, installing the pure-Python modules (slower)"

#: setuptools' own words for a failed optional extension, which the line above replaces.
SETUPTOOLS_WARNING = 'building extension "txnsq.'

#: gnsq's test harness starts only an nsqd whose ``--version`` matches this.
VERSION_LINE = re.compile(r"^nsqd v\d+\.\d+\.\d+(-\S+)? \(built w/[a-z0-9.-]+\)$")

#: The compiled speed-ups, as paths without the extension suffix.
COMPILED = [
    "txnsq/protocol/_v2",
    "txnsq/protocol/_message",
    "txnsq/storage/_log_format",
    "txnsq/storage/_diskqueue_format",
]

#: Files the sdist must hold (beside every file under docs/).
SDIST_FILES = [
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "txnsq/__init__.py",
    "txnsq/protocol/_v2.c",
    "txnsq/protocol/_message.c",
    "txnsq/storage/_log_format.c",
    "txnsq/storage/_diskqueue_format.c",
    "txnsq/nsqadmin/static/nsqadmin.css",
    "txnsq/nsqadmin/static/nsqadmin.js",
    "twisted/plugins/txnsq_services.py",
    "twisted/plugins/txnsq_storage.py",
]

#: Trees that live only in the repository.
REPOSITORY_ONLY = ["tests/", "tests_spark/", "tests_browser/", "bench/", "lab/", ".ci/", "examples/"]

#: Files the wheel must hold (beside the compiled speed-ups).
WHEEL_FILES = [
    "txnsq/nsqd/script.py",
    "txnsq/nsqadmin/static/nsqadmin.js",
    "twisted/plugins/txnsq_services.py",
    "twisted/plugins/txnsq_storage.py",
]

#: The end of the ``--version`` line: which hot path runs (txnsq.speedups.hot_path_token).
_HOT_PATH_TOKEN = re.compile(r"-(partly-compiled|compiled|pure)\)$")

_LISTENING = re.compile(r"TCP: listening on 127\.0\.0\.1:([0-9]+)")

_TOPIC = "release_check"
_BODY = b"a release that installs"


class CheckFailed(Exception):
    """A check of the release failed; the message says which and why."""


def step(text: str) -> None:
    """Print where the check is, with the time since it started."""
    print("[release %6.1fs] %s" % (time.monotonic() - _STARTED, text), flush=True)


def clean_environment(**extra: str) -> Dict[str, str]:
    """
    The environment of the installs and daemons: nothing that would put a
    source tree or another environment on their path, nor turn the
    compiled speed-ups off.
    """
    environment = dict(os.environ)
    for name in _UNSET:
        environment.pop(name, None)
    environment["PYTHONNOUSERSITE"] = "1"
    environment.update(extra)
    return environment


def run(command: Sequence[str], cwd: str, environment: Optional[Dict[str, str]] = None) -> str:
    """
    Run ``command``; its output (stdout and stderr together).

    :raises CheckFailed: it exited with another status than 0.
    """
    result = subprocess.run(
        list(command),
        cwd=cwd,
        env=environment if environment is not None else clean_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
    )
    if result.returncode != 0:
        raise CheckFailed(
            "%s exited with %d:\n%s" % (" ".join(command), result.returncode, result.stdout[-6000:])
        )
    return result.stdout


def build(dist: str) -> Tuple[str, str]:
    """``python -m build``: the sdist, then the wheel from it; their paths."""
    step("python -m build (the sdist, then the wheel from the sdist)")
    run([sys.executable, "-m", "build", "--outdir", dist, ROOT], cwd=ROOT, environment=clean_environment())
    sdists = glob.glob(os.path.join(dist, "txnsq-*.tar.gz"))
    wheels = glob.glob(os.path.join(dist, "txnsq-*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed("expected one sdist and one wheel in %s, found %s" % (dist, os.listdir(dist)))
    step("built %s and %s" % (os.path.basename(sdists[0]), os.path.basename(wheels[0])))
    return sdists[0], wheels[0]


def twine_check(paths: Sequence[str]) -> None:
    """``twine check --strict`` of the sdist and the wheel."""
    step("twine check --strict")
    print(run([sys.executable, "-m", "twine", "check", "--strict"] + list(paths), cwd=ROOT).rstrip())


def sdist_names(sdist: str) -> List[str]:
    """The sdist's file names, relative to its top directory."""
    with tarfile.open(sdist) as archive:
        return [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]


def check_sdist(sdist: str) -> None:
    """The sdist holds the sources, the plugins and the docs, and no repository-only tree."""
    step("the sdist's files")
    names = set(sdist_names(sdist))
    docs = [
        os.path.relpath(path, ROOT).replace(os.sep, "/")
        for path in glob.glob(os.path.join(ROOT, "docs", "**", "*"), recursive=True)
        if os.path.isfile(path) and os.path.splitext(path)[1] in (".md", ".png")
    ]
    if not docs:
        raise CheckFailed("no docs found under %s" % (os.path.join(ROOT, "docs"),))
    missing = sorted(name for name in SDIST_FILES + docs if name not in names)
    if missing:
        raise CheckFailed("the sdist lacks %s" % (", ".join(missing),))
    stray = sorted(name for name in names if any(name.startswith(tree) for tree in REPOSITORY_ONLY))
    if stray:
        raise CheckFailed("the sdist holds repository-only files: %s" % (", ".join(stray[:20]),))
    print(
        "  %d files, %d of them docs; the four C sources; no %s"
        % (len(names), len(docs), " ".join(REPOSITORY_ONLY))
    )


def check_wheel(wheel: str) -> None:
    """The wheel holds the compiled speed-ups and the plugins, and no C source."""
    step("the wheel's files")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    missing = [name for name in WHEEL_FILES if name not in names]
    for module in COMPILED:
        if not any(name.startswith(module + ".") and name.endswith((".so", ".pyd")) for name in names):
            missing.append(module + ".*.so")
    if missing:
        raise CheckFailed("the wheel lacks %s" % (", ".join(missing),))
    unwanted = [
        name for name in names if name.endswith(".c") or any(name.startswith(tree) for tree in REPOSITORY_ONLY)
    ]
    if unwanted:
        raise CheckFailed("the wheel holds %s" % (", ".join(unwanted),))
    print("  %d files, the four compiled modules, the two plugins, no C source" % (len(names),))


def make_virtualenv(path: str) -> str:
    """A fresh virtualenv at ``path`` (of the base interpreter, not this environment); its bin directory."""
    step("a fresh virtualenv in %s" % (path,))
    base = getattr(sys, "_base_executable", None) or sys.executable
    run([base, "-m", "venv", path], cwd=os.path.dirname(path))
    return os.path.join(path, "bin")


def check_isolated(bin_dir: str, where: str, expected_hot_path: str) -> None:
    """txnsq imports from the virtualenv, not from a source tree, and runs the expected hot path."""
    output = run(
        [
            os.path.join(bin_dir, "python"),
            "-c",
            "import txnsq, txnsq.speedups as s; print(txnsq.__file__); print(s.hot_path())",
        ],
        cwd=where,
    )
    location, hot_path = output.strip().splitlines()[-2:]
    prefix = os.path.dirname(bin_dir)
    if not os.path.realpath(location).startswith(os.path.realpath(prefix) + os.sep):
        raise CheckFailed("txnsq imported from %s, outside the virtualenv %s" % (location, prefix))
    if not hot_path.startswith(expected_hot_path):
        raise CheckFailed("the hot path is %r, expected %s" % (hot_path, expected_hot_path))
    print("  txnsq from %s; hot path: %s" % (location, hot_path))


def check_version(bin_dir: str, where: str, hot_path: str) -> None:
    """``nsqd --version`` matches gnsq's harness and ends in ``-HOT_PATH)``."""
    line = run([os.path.join(bin_dir, "nsqd"), "--version"], cwd=where).strip()
    print("  nsqd --version: %s" % (line,))
    if not VERSION_LINE.match(line):
        raise CheckFailed("nsqd --version printed %r, which gnsq's harness refuses" % (line,))
    found = _HOT_PATH_TOKEN.search(line)
    if found is None or found.group(1) != hot_path:
        raise CheckFailed("nsqd --version printed %r, not ending in -%s)" % (line, hot_path))


def read_frame(connection: socket.socket) -> Tuple[int, bytes]:
    """One V2 frame: ``(frame type, data)``."""
    header = receive(connection, 8)
    size, frame_type = struct.unpack(">Ii", header)
    return frame_type, receive(connection, size - 4)


def receive(connection: socket.socket, count: int) -> bytes:
    """Exactly ``count`` bytes."""
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise CheckFailed("nsqd closed the connection")
        data += chunk
    return data


def expect_ok(connection: socket.socket, command: str) -> None:
    """The answer to ``command`` is ``OK``."""
    frame_type, data = read_frame(connection)
    if (frame_type, data) != (0, b"OK"):
        raise CheckFailed("%s was answered %r (frame type %d)" % (command, data, frame_type))


def publish(producer: socket.socket, body: bytes) -> None:
    """PUB ``body`` and wait for its OK."""
    producer.sendall(b"PUB %s\n" % (_TOPIC.encode(),) + struct.pack(">I", len(body)) + body)
    expect_ok(producer, "PUB")


def consume(consumer: socket.socket, body: bytes) -> bytes:
    """The next frame is a message with ``body`` and one attempt; its id."""
    frame_type, data = read_frame(consumer)
    if frame_type != 2:
        raise CheckFailed("expected a message, got %r (frame type %d)" % (data, frame_type))
    attempts, message_id, received = struct.unpack(">H", data[8:10])[0], data[10:26], data[26:]
    if (received, attempts) != (body, 1):
        raise CheckFailed("received %r (attempts %d), expected %r (attempts 1)" % (received, attempts, body))
    return message_id


def publish_and_consume(port: int) -> None:
    """
    PUB a message on one connection, SUB and RDY 1 on another, receive it
    and FIN it; then a second one, which comes only if the FIN was taken
    (with RDY 1, nsqd sends nothing while a message is in flight, and a
    refused FIN would have been answered with an error frame first).
    """
    first, second = _BODY + b" (1)", _BODY + b" (2)"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as producer:
        producer.sendall(b"  V2")
        publish(producer, first)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as consumer:
            consumer.sendall(b"  V2" + b"SUB %s ch\n" % (_TOPIC.encode(),))
            expect_ok(consumer, "SUB")
            consumer.sendall(b"RDY 1\n")
            consumer.sendall(b"FIN " + consume(consumer, first) + b"\n")
            publish(producer, second)
            consumer.sendall(b"FIN " + consume(consumer, second) + b"\n")
            consumer.sendall(b"CLS\n")
            frame_type, data = read_frame(consumer)
            if (frame_type, data) != (0, b"CLOSE_WAIT"):
                raise CheckFailed("CLS was answered %r (frame type %d)" % (data, frame_type))


def check_serves(bin_dir: str, where: str) -> None:
    """An nsqd on 127.0.0.1:0 takes a PUB and delivers it to a SUB, then stops on SIGTERM."""
    data_path = tempfile.mkdtemp(prefix="nsqd-", dir=where)
    command = [
        os.path.join(bin_dir, "nsqd"),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--data-path=" + data_path,
    ]
    process = subprocess.Popen(
        command, cwd=where, env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    output = b""
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None:
            if time.monotonic() > deadline or process.poll() is not None:
                raise CheckFailed(
                    "nsqd did not say where it listens:\n%s" % (output.decode("utf-8", "replace"),)
                )
            readable, _, _ = select.select([process.stdout], [], [], 0.5)
            if readable:
                output += os.read(process.stdout.fileno(), 65536)
                found = _LISTENING.search(output.decode("utf-8", "replace"))
                if found:
                    port = int(found.group(1))
        print("  nsqd listens on 127.0.0.1:%d" % (port,))
        publish_and_consume(port)
        print("  PUB, SUB, RDY 1, FIN, PUB, FIN, CLS: both messages came back once, intact")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise CheckFailed("nsqd did not stop within 15 s of SIGTERM")
        process.stdout.close()
    if process.returncode != 0:
        raise CheckFailed("nsqd exited with %d after SIGTERM" % (process.returncode,))


def check_compiled_install(wheel: str, work: str) -> None:
    """The wheel in a fresh virtualenv: compiled, and it serves."""
    bin_dir = make_virtualenv(os.path.join(work, "venv-wheel"))
    step("pip install the wheel")
    run([os.path.join(bin_dir, "python"), "-m", "pip", "install", "--quiet", wheel], cwd=work)
    where = tempfile.mkdtemp(prefix="run-", dir=work)
    check_isolated(bin_dir, where, "compiled (")
    check_version(bin_dir, where, "compiled")
    check_serves(bin_dir, where)


def check_pure_install(sdist: str, work: str) -> None:
    """The sdist with no C compiler (``CC=false``): one line says so, and the pure Python serves."""
    bin_dir = make_virtualenv(os.path.join(work, "venv-sdist-no-compiler"))
    # A path of its own, so that pip cannot take a wheel it cached from
    # this sdist's path in an earlier run.
    copy_dir = tempfile.mkdtemp(prefix="sdist-", dir=work)
    copy = os.path.join(copy_dir, os.path.basename(sdist))
    shutil.copy(sdist, copy)
    step("CC=false pip install --no-binary txnsq %s" % (os.path.basename(sdist),))
    output = run(
        [os.path.join(bin_dir, "python"), "-m", "pip", "install", "-v", "--no-binary", "txnsq", copy],
        cwd=work,
        environment=clean_environment(CC="false"),
    )
    lines = [line.strip() for line in output.splitlines() if FALLBACK_LINE in line]
    if len(lines) != 1:
        raise CheckFailed(
            "expected one %r line from the install, found %d:\n%s"
            % (FALLBACK_LINE, len(lines), output[-6000:])
        )
    if SETUPTOOLS_WARNING in output:
        raise CheckFailed("setuptools still warns once per extension:\n%s" % (output[-6000:],))
    print("  %s" % (lines[0],))
    where = tempfile.mkdtemp(prefix="run-", dir=work)
    check_isolated(bin_dir, where, "pure Python")
    check_version(bin_dir, where, "pure")
    check_serves(bin_dir, where)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if platform.python_implementation() != "CPython":
        print("the release check builds the compiled wheel: run it on CPython", file=sys.stderr)
        return 2
    work = os.path.abspath(argv[1])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        sdist, wheel = build(os.path.join(work, "dist"))
        twine_check([sdist, wheel])
        check_sdist(sdist)
        check_wheel(wheel)
        check_compiled_install(wheel, work)
        check_pure_install(sdist, work)
    except CheckFailed as failure:
        step("FAILED: %s" % (failure,))
        return 1
    step("the release installs and serves, compiled and pure")
    return 0


_STARTED = time.monotonic()

if __name__ == "__main__":
    sys.exit(main(sys.argv))
