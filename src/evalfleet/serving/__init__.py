"""Policy servers and the remote-client policies that talk to them.

Importing this package registers the `openpi_remote`, `gr00t_remote` and `vlaeval_remote` policies and the server
bindings (`evalfleet.serving.bindings.SERVER_BINDINGS`). Heavy dependencies (websockets, pyzmq, Pillow) are
imported only when a server or client is actually used.
"""

# Each protocol module registers its protocol, its remote-client policy and that client's server binding.
from evalfleet.serving import gr00t, lerobot, openpi, vlaeval  # noqa: F401
from evalfleet.serving import arena_bindings  # noqa: F401 - Arena's remote policy types' server bindings
