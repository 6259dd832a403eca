"""``nnx_api.storage``: the public home of the stores and the port."""

from __future__ import annotations

from nnx_adapters.storage.fsspec import FsspecStorage, StorageGuaranteeError
from nnx_adapters.storage.memory import MemoryStorage
from nnx_api import storage as public


def test_nnx_api_storage_exports_the_stores_and_the_port(tmp_path):
    assert public.FsspecStorage is FsspecStorage and public.StorageGuaranteeError is StorageGuaranteeError
    assert public.MemoryStorage is MemoryStorage
    for store in (public.MemoryStorage(), public.FileStorage(tmp_path), public.FsspecStorage("memory", "/api")):
        assert isinstance(store, public.Storage)
        assert store.write("r/f", b"x") == public.Receipt("r/f", 1, store.digest("r/f").sha256)
