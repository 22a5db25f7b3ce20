"""``eoclient serve`` tunes its process's collector once the server has started
(``cli/serve_gc.py``); the test restores this process's setting afterwards."""

from __future__ import annotations

import gc

from eoclient.cli.serve_gc import GEN0_THRESHOLD, tune_collector


def test_young_collections_are_rarer_and_the_older_factors_stay() -> None:
    threshold = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == (GEN0_THRESHOLD, threshold[1], threshold[2])
    finally:
        gc.set_threshold(*threshold)
