"""A worker of the local pool freezes what it inherited from the driver (executor._local_init):
its garbage collections skip those objects, so they do not write to (and copy) every page
of the driver's heap; the driver's own collections are as they were."""
import gc

from mirage.search import driver as D
from mirage.search import executor as X


def _tracked(ident: int) -> tuple:
    """In a worker: its frozen objects' count, and whether the collector walks object `ident`."""
    return gc.get_freeze_count(), any(id(o) == ident for o in gc.get_objects())


def test_workers_skip_the_objects_they_inherit_and_the_driver_does_not():
    inherited = [[k] for k in range(1000)]  # containers of the driver, tracked by its collector
    before = gc.get_freeze_count()  # Python 3.12 freezes objects of its own at start
    pool = X.make("local", 2, D._ignore_sigint, (), None)
    try:
        assert gc.get_freeze_count() == before
        assert any(o is inherited for o in gc.get_objects())
        pool.submit(_tracked, id(inherited))
        frozen, walked = pool.next_done(timeout=60)[1]
        assert frozen >= 1000 and not walked
    finally:
        pool.close()
