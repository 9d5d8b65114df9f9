"""puffer-harness: run PufferLib's native trainer under hang watchdogs and explain what happened."""

__version__ = "0.1.0"
