"""The one error a user sees when a kernel cannot be lifted."""
from __future__ import annotations


class LiftError(ValueError):
    """A kernel construct the lifter does not handle, or a kernel whose effect is not a
    tensor formula. `where` is "file:line" of the construct when known."""

    def __init__(self, message: str, where: str | None = None):
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
