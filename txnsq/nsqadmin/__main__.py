"""``python -m txnsq.nsqadmin``: the ``nsqadmin`` console script."""

from txnsq.nsqadmin.service import main

main()
