"""The first name of :mod:`torchjob.train.in_place`, kept so that scripts importing ``InPlaceTraining`` from it
run unchanged; new code imports ``torchjob.train.in_place``."""

from torchjob.train.in_place import InPlaceTraining

__all__ = ["InPlaceTraining"]
