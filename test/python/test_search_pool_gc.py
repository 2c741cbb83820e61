"""The local pool forks its workers with the driver's objects frozen (executor._frozen): a
worker's garbage collections skip what it inherited, so they do not write to (and copy)
every page of the driver's heap; the driver's objects are collectable again after."""
import gc

from mirage.search import driver as D
from mirage.search import executor as X


def _tracked(ident: int) -> tuple:
    """In a worker: its frozen objects' count, and whether the collector walks object `ident`."""
    return gc.get_freeze_count(), any(id(o) == ident for o in gc.get_objects())


def test_workers_skip_the_objects_they_inherit_and_the_driver_does_not():
    inherited = [[k] for k in range(1000)]  # containers of the driver, tracked by its collector
    assert gc.get_freeze_count() == 0
    pool = X.make("local", 2, D._ignore_sigint, (), None)
    try:
        assert gc.get_freeze_count() == 0  # the driver's own collections walk them again
        assert any(o is inherited for o in gc.get_objects())
        pool.submit(_tracked, id(inherited))
        frozen, walked = pool.next_done(timeout=60)[1]
        assert frozen >= 1000 and not walked
    finally:
        pool.close()
