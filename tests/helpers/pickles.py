"""A pickle payload that shows whether a file was unpickled: the checkpoint-safety tests plant it where a checkpoint
file would be, and the load must never run it."""

from pathlib import Path


class CreatesMarker:
    """Unpickling this creates the marker file: what a crafted checkpoint file could do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")
