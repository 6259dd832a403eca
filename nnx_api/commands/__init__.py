"""Shell commands beyond ``nnx_api.cli``'s own: ``runs_extra`` (``nnx runs plot | compare | export``)."""
