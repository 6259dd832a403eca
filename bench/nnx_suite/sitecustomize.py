"""``import nnx`` → ``nnx_api`` in every Python process started with this folder on ``PYTHONPATH``.

``run.py`` puts this folder on the suite's ``PYTHONPATH``, and processes the tests start inherit
it: the ``torchrun`` ranks of NNx's DDP tests run ``tests/ddp_scenarios.py`` with no pytest (and
so no ``-p alias`` plugin) around them. Python imports ``sitecustomize`` at startup; this one
installs ``alias.py``'s finder and nothing else.
"""

import alias  # noqa: F401 - importing it installs the finder
