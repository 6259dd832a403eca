"""``python -m nnx_api.export_conformance``: run the conformance profiles (``main``'s ``--help``)."""

from nnx_api.export_conformance import main

if __name__ == "__main__":
    raise SystemExit(main())
