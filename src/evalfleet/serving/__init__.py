"""Policy servers and the remote-client policies that talk to them.

Importing this package registers the `openpi_remote` and `gr00t_remote` policies and the server
bindings (`evalfleet.serving.bindings.SERVER_BINDINGS`). Heavy dependencies (websockets, pyzmq) are
imported only when a server or client is actually used.
"""

from evalfleet.serving import gr00t, openpi  # noqa: F401 - register the remote-client policies
from evalfleet.serving import bindings  # noqa: E402,F401 - registers the server bindings
