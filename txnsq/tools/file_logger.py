# -*- test-case-name: tests.test_tools_file_logger -*-
"""
One topic's output file for ``nsq_to_file``: writing, batching the FINs,
rotation, gzip and the move from the work directory, as Go
``nsq_to_file``'s ``FileLogger`` does them.

Each message's body is written with a newline, and the message is kept
unanswered.  The batch is synced to disk (for gzip: the gzip member is
closed, so that the file is a valid concatenation of members, then the
file is fsynced) and every message of it FINished when the batch reaches
``--max-in-flight``, when the consumer is starved, every
``--sync-interval`` and on rotation and shutdown -- never one fsync per
message.  A file is rotated when the ``<DATETIME>`` part of its name
changes, after ``--rotate-interval`` and when it has grown past
``--rotate-size`` bytes (bytes written, before compression).  Files are
written in ``--work-dir`` and moved to ``--output-dir`` when closed,
never over an existing file.

Time comes from the injected clock; file IO is plain blocking IO, as in
Go, done in the reactor thread.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import IO, Any, Callable, List, Optional

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from txnsq.protocol.go_values import format_duration
from txnsq.tools.filename import (
    REV,
    dated_filename,
    go_path_join,
    output_path,
    with_revision,
)

__all__ = ["FileLogger", "FileLoggerError", "FileLoggerSettings"]


class FileLoggerError(Exception):
    """Writing, syncing, opening or moving a file failed; Go exits 1."""


@dataclass
class FileLoggerSettings:
    """
    The ``nsq_to_file`` flags a :class:`FileLogger` obeys (durations in
    seconds, sizes in bytes).  ``work_dir`` is ``output_dir`` when the
    flag is not given.
    """

    output_dir: str = "/tmp"
    work_dir: str = "/tmp"
    channel: str = "nsq_to_file"
    datetime_format: str = "%Y-%m-%d_%H"
    gzip: bool = False
    gzip_level: int = 6
    rotate_size: int = 0
    rotate_interval: float = 0.0
    sync_interval: float = 30.0
    skip_empty_files: bool = False
    max_in_flight: int = 200


class FileLogger:
    """
    The file a topic's messages are written to.

    Messages are anything with ``body``, ``enable_async()`` and
    ``finish()`` (:class:`txnsq.client.Message`).

    :param topic: the topic, for log lines.
    :param template: the topic's file name template
        (:func:`txnsq.tools.filename.compute_filename_format`).
    :param clock: the time source and the sync-interval timer.
    :param is_starved: the consumer's ``is_starved``; a starved consumer
        gets no more messages until some are answered, so the batch is
        synced at once.
    """

    log = Logger()

    def __init__(
        self,
        topic: str,
        settings: FileLoggerSettings,
        template: str,
        clock: IReactorTime,
        is_starved: Callable[[], bool] = lambda: False,
    ) -> None:
        self.topic = topic
        self.settings = settings
        self.template = template
        self._clock = clock
        self._is_starved = is_starved
        self._pending: List[Any] = []
        self._out: Optional[IO[bytes]] = None
        self._gzip: Optional[gzip.GzipFile] = None
        self._path = ""
        # The dated name with <REV> still in it, to resolve name clashes.
        self._filename = ""
        self._open_time = 0.0
        self._filesize = 0
        self._rev = 0
        self._stopping = False
        self._closed = False
        self._ticker = LoopingCall(self.sync_tick)
        self._ticker.clock = clock
        #: Paths of the finished files, in order (in the output directory).
        self.files_written: List[str] = []

    # --- events ------------------------------------------------------

    def start(self) -> None:
        """Start the ``--sync-interval`` timer."""
        if self.settings.sync_interval > 0 and not self._ticker.running:
            self._ticker.start(self.settings.sync_interval, now=False)

    def handle(self, message: Any) -> None:
        """
        Write one message; it is FINished once the batch it is in is synced.

        :raises FileLoggerError: the file could not be opened or written.
        """
        if self._closed:
            raise FileLoggerError("[%s/%s] file logger closed" % (self.topic, self.settings.channel))
        message.enable_async()
        sync = self._stopping
        if self._needs_rotation():
            self._update_file()
            sync = True
        self._write(message.body)
        self._write(b"\n")
        self._pending.append(message)
        if len(self._pending) >= self.settings.max_in_flight:
            sync = True
        self._after_event(sync)

    def sync_tick(self) -> None:
        """
        The ``--sync-interval`` timer: rotate if due (with
        ``--skip-empty-files``, only close; the next message opens the
        next file), then sync and FIN the batch.
        """
        close_file = False
        if self._needs_rotation():
            if self.settings.skip_empty_files:
                close_file = True
            else:
                self._update_file()
        self._after_event(True, close_file)

    def reopen(self) -> None:
        """SIGHUP: sync and FIN the batch and close the file; the next message opens a new one."""
        self._after_event(True, close_file=True)

    def stop(self) -> None:
        """
        Shutdown begins (the consumer is being closed): stop the timer,
        sync and FIN the batch; from now on every message is synced and
        FINished at once, so that the consumer's close is not kept waiting.
        """
        if self._ticker.running:
            self._ticker.stop()
        self._stopping = True
        self._after_event(True)

    def close(self) -> None:
        """The consumer is closed: sync and FIN the batch, close and move the file."""
        if self._closed:
            return
        if self._ticker.running:
            self._ticker.stop()
        self._stopping = True
        self._after_event(True, close_file=True)
        self._closed = True

    @property
    def pending(self) -> int:
        """Messages written but not yet synced and FINished."""
        return len(self._pending)

    @property
    def current_path(self) -> Optional[str]:
        """The path of the open file, or None."""
        return self._path if self._out is not None else None

    # --- internals ---------------------------------------------------

    def _fail(self, what: str, error: BaseException) -> FileLoggerError:
        return FileLoggerError(
            "[%s/%s] %s: %s" % (self.topic, self.settings.channel, what, error)
        )

    def _after_event(self, sync: bool, close_file: bool = False) -> None:
        if sync or self._is_starved():
            if self._pending:
                self.log.debug(
                    "[{topic}/{channel}] syncing {count} records to disk",
                    topic=self.topic,
                    channel=self.settings.channel,
                    count=len(self._pending),
                )
                try:
                    self._sync()
                except OSError as error:
                    raise self._fail("failed syncing messages", error)
                pending, self._pending = self._pending, []
                for message in pending:
                    message.finish()
        if close_file:
            self._close_file()

    def _write(self, data: bytes) -> None:
        writer: Any = self._gzip if self._gzip is not None else self._out
        try:
            writer.write(data)
        except (OSError, ValueError) as error:
            raise self._fail("writing message to disk", error)
        self._filesize += len(data)

    def _new_gzip(self) -> None:
        assert self._out is not None
        # No name and no time in the header, as Go's gzip.Writer.
        self._gzip = gzip.GzipFile(
            filename="",
            mode="wb",
            compresslevel=self.settings.gzip_level,
            fileobj=self._out,
            mtime=0,
        )

    def _sync(self) -> None:
        assert self._out is not None
        if self._gzip is not None:
            # End the gzip member: the file is then a valid concatenation
            # of members, each ending with the checksum of a synced batch.
            self._gzip.close()
            self._out.flush()
            os.fsync(self._out.fileno())
            self._new_gzip()
        else:
            self._out.flush()
            os.fsync(self._out.fileno())

    def _current_filename(self) -> str:
        return dated_filename(self.template, self.settings.datetime_format, self._clock.seconds())

    def _needs_rotation(self) -> bool:
        if self._out is None:
            return True
        filename = self._current_filename()
        if filename != self._filename:
            self.log.info(
                "[{topic}/{channel}] new filename {filename}, rotating...",
                topic=self.topic,
                channel=self.settings.channel,
                filename=filename,
            )
            return True
        interval = self.settings.rotate_interval
        if interval > 0:
            since = self._clock.seconds() - self._open_time
            if since > interval:
                self.log.info(
                    "[{topic}/{channel}] {since} since last open, rotating...",
                    topic=self.topic,
                    channel=self.settings.channel,
                    since=format_duration(since),
                )
                return True
        size = self.settings.rotate_size
        if size > 0 and self._filesize > size:
            self.log.info(
                "[{topic}/{channel}] {path} currently {filesize} bytes (> {size}), rotating...",
                topic=self.topic,
                channel=self.settings.channel,
                path=self._path,
                filesize=self._filesize,
                size=size,
            )
            return True
        return False

    def _update_file(self) -> None:
        settings = self.settings
        self._close_file()
        filename = self._current_filename()
        if filename != self._filename:
            self._rev = 0
        else:
            self._rev += 1
        self._filename = filename
        self._open_time = self._clock.seconds()
        full_path = go_path_join(settings.work_dir, filename)
        self._make_dirs(full_path)
        moving = settings.work_dir != settings.output_dir
        flags = os.O_WRONLY | os.O_CREAT
        if settings.gzip or settings.rotate_interval > 0:
            flags |= os.O_EXCL
        else:
            flags |= os.O_APPEND
        while True:
            path = with_revision(full_path, self._rev)
            if moving:
                # Skip names already taken in the output directory, so that
                # the move at close does not have to.
                destination = output_path(path, settings.work_dir, settings.output_dir)
                self._make_dirs(destination)
                if os.path.lexists(destination):
                    self.log.warn(
                        "[{topic}/{channel}] output file already exists: {path}",
                        topic=self.topic,
                        channel=settings.channel,
                        path=destination,
                    )
                    self._rev += 1
                    continue
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                self.log.warn(
                    "[{topic}/{channel}] working file already exists: {path}",
                    topic=self.topic,
                    channel=settings.channel,
                    path=path,
                )
                self._rev += 1
                continue
            except OSError as error:
                raise self._fail("unable to open %s" % (path,), error)
            self.log.info(
                "[{topic}/{channel}] opening {path}",
                topic=self.topic,
                channel=settings.channel,
                path=path,
            )
            self._filesize = os.fstat(fd).st_size
            if settings.rotate_size > 0 and self._filesize > settings.rotate_size:
                self.log.info(
                    "[{topic}/{channel}] {path} currently {filesize} bytes (> {size}), rotating...",
                    topic=self.topic,
                    channel=settings.channel,
                    path=path,
                    filesize=self._filesize,
                    size=settings.rotate_size,
                )
                os.close(fd)
                self._rev += 1
                continue
            break
        self._out = open(fd, "wb", buffering=64 * 1024)
        self._path = path
        if settings.gzip:
            self._new_gzip()
        else:
            self._gzip = None

    def _make_dirs(self, path: str) -> None:
        directory = os.path.dirname(path)
        if directory:
            try:
                os.makedirs(directory, mode=0o770, exist_ok=True)
            except OSError as error:
                raise self._fail("unable to create dir", error)

    def _close_file(self) -> None:
        out = self._out
        if out is None:
            return
        try:
            if self._gzip is not None:
                self._gzip.close()
                self._gzip = None
            out.flush()
            os.fsync(out.fileno())
            out.close()
        except OSError as error:
            raise self._fail("failed to close output file", error)
        self._out = None
        source = self._path
        settings = self.settings
        if settings.work_dir == settings.output_dir:
            self.files_written.append(source)
            return
        destination = output_path(source, settings.work_dir, settings.output_dir)
        self.log.info(
            "[{topic}/{channel}] moving finished file {source} to {destination}",
            topic=self.topic,
            channel=settings.channel,
            source=source,
            destination=destination,
        )
        if self._exclusive_rename(source, destination):
            self.files_written.append(destination)
            return
        # The name was taken meanwhile: the next free revision.
        template = os.path.join(
            os.path.dirname(destination), os.path.basename(self._filename)
        )
        rev = self._rev + 1
        while True:
            self.log.warn(
                "[{topic}/{channel}] destination file already exists: {path}",
                topic=self.topic,
                channel=settings.channel,
                path=destination,
            )
            destination = template.replace(REV, "-%06d" % (rev,))
            if self._exclusive_rename(source, destination):
                break
            rev += 1
        self.log.info(
            "[{topic}/{channel}] renamed finished file {source} to {destination} to avoid overwrite",
            topic=self.topic,
            channel=settings.channel,
            source=source,
            destination=destination,
        )
        self.files_written.append(destination)

    def _exclusive_rename(self, source: str, destination: str) -> bool:
        """
        Move without ever replacing a file: link, then unlink.  False when
        ``destination`` exists.

        :raises FileLoggerError: for any other failure.
        """
        try:
            os.link(source, destination)
        except FileExistsError:
            return False
        except OSError as error:
            raise self._fail(
                "unable to move file from %s to %s" % (source, destination), error
            )
        try:
            os.remove(source)
        except OSError as error:
            raise self._fail("unable to remove %s" % (source,), error)
        return True
