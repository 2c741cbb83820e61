"""Lax partitioning: placeholder filled below."""
def needs_partition(ref):
    return False
def partitioned_search(*a): raise NotImplementedError
