"""evalfleet: evaluate robot-manipulation policies in simulation at scale."""

__version__ = "0.1.0"
