"""``Storage`` adapters: the file system (``fs``) and an in-memory model with crash injection (``memory``)."""
