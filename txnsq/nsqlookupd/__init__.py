"""nsqlookupd: the discovery daemon NSQ producers register with and consumers query."""
