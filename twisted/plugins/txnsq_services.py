"""twistd plugins for the txnsq daemons: ``twistd nsqd``."""

from twisted.application.service import ServiceMaker

nsqd = ServiceMaker(
    "txnsq nsqd", "txnsq.nsqd.tap", "NSQ daemon: the message broker", "nsqd"
)
