"""twistd plugins for the txnsq daemons: ``twistd nsqd``, ``twistd nsqlookupd``, ``twistd nsqadmin``."""

from twisted.application.service import ServiceMaker

nsqd = ServiceMaker(
    "txnsq nsqd", "txnsq.nsqd.tap", "NSQ daemon: the message broker", "nsqd"
)
nsqlookupd = ServiceMaker(
    "txnsq nsqlookupd",
    "txnsq.nsqlookupd.tap",
    "NSQ lookup daemon: producer discovery",
    "nsqlookupd",
)
nsqadmin = ServiceMaker(
    "txnsq nsqadmin", "txnsq.nsqadmin.tap", "NSQ admin: the cluster web UI and JSON API", "nsqadmin"
)
