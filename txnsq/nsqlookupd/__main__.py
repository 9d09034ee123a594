"""``python -m txnsq.nsqlookupd``: the same as the ``nsqlookupd`` console script."""

from txnsq.nsqlookupd.service import main

main()
