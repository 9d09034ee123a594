"""``python -m txnsq.nsqd``: the same as the ``nsqd`` console script."""

from txnsq.nsqd.service import main

main()
