"""Helpers the tests share that are not fixtures (the fixtures are in ``tests/conftest.py``).

Test modules import them as ``from support.wire import Wire, unique``: pytest puts the
``tests`` directory on ``sys.path`` (its default "prepend" import mode), as it does for
``conftest.py``.
"""
