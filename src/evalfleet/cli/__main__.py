"""`python -m evalfleet.cli`: the `evalfleet` command run by this interpreter (runners and servers evalfleet
starts with its own Python)."""

from evalfleet.cli import entry

if __name__ == "__main__":
    entry()
