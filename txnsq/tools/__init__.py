"""
NSQ's command-line utilities, with the flags of Go NSQ v1.3's ``apps/``.

- ``nsq_tail`` (:mod:`txnsq.tools.nsq_tail`): print a topic's messages;
- ``to_nsq`` (:mod:`txnsq.tools.to_nsq`): publish standard input, one
  message per line;
- ``nsq_to_file`` (:mod:`txnsq.tools.nsq_to_file`): archive topics to
  rotating, optionally gzipped files;
- ``nsq_stat`` (:mod:`txnsq.tools.nsq_stat`): a channel's statistics
  across its nsqds, every interval;
- ``nsq_to_nsq`` (:mod:`txnsq.tools.nsq_to_nsq`): republish topics to
  other nsqds, with JSON field filters;
- ``nsq_to_http`` (:mod:`txnsq.tools.nsq_to_http`): send each message to
  HTTP endpoints (GET templates or POST bodies);
- ``nsq_log`` (:mod:`txnsq.tools.nsq_log`): print a retained topic's
  partition by offset, over nsqd's MetaQ listener.

Each is a console script and runs as ``python -m txnsq.tools.NAME``.  The
pieces they are made of (go-nsq's ``--consumer-opt`` settings, Go's
strftime, the file naming, rotation and gzip logic, the stats table, the
stdin splitter, the rate limiter, go-hostpool's pools and the
timer_metrics status lines) are plain classes that tests drive
with ``twisted.internet.task.Clock``.

Public API: none.  This package is private to txnsq: the utilities are
public as commands, not as Python.
"""

__all__ = ["nsq_log", "nsq_stat", "nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq"]
