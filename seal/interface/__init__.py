"""The training-time learning interface Omega: what the learner is shown around the unchanged benchmark."""

from seal.interface.view import PLAIN, PlainView, View

__all__ = ["PLAIN", "PlainView", "View"]
