"""``python -m txnsq.nsqd``: the same as the ``nsqd`` console script."""

from txnsq.nsqd.script import main

main()
