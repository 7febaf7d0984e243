"""The protocol registry: one entry per wire protocol (server, client, health check, default port), the one
place `evalfleet serve`, the health checks, servers in a thread and the server bindings look a protocol up."""

from __future__ import annotations

import argparse

import pytest
from serving_test_policies import ServingTestPolicy

from evalfleet.cli import serve as serve_cli
from evalfleet.serving.bindings import binding_for
from evalfleet.serving.gr00t import Gr00tServer
from evalfleet.serving.openpi import OpenpiServer
from evalfleet.serving.process import ServerThread, check_health, server_for
from evalfleet.serving.protocols import PROTOCOLS, wire_protocol
from evalfleet.serving.vlaeval import VlaEvalServer


def test_every_protocol_is_registered_with_its_server_client_and_port():
    assert PROTOCOLS.names() == ["gr00t", "openpi", "vla-eval"]
    assert {name: (wire_protocol(name).server, wire_protocol(name).client, wire_protocol(name).default_port)
            for name in PROTOCOLS.names()} == {
        "openpi": (OpenpiServer, "openpi_remote", 8000), "gr00t": (Gr00tServer, "gr00t_remote", 5555),
        "vla-eval": (VlaEvalServer, "vlaeval_remote", 8000)}
    with pytest.raises(ValueError, match="unknown protocol 'http' \\(known: gr00t, openpi, vla-eval\\)"):
        wire_protocol("http")


def test_the_serve_command_takes_exactly_the_registered_protocols(capsys):
    """`--protocol` is checked against the registry once the plug-ins are loaded (a plug-in's protocol is served:
    tests/plugins/test_backend_and_protocol_plugins.py); anything else is refused naming the known ones."""
    from evalfleet.cli import main

    assert main(["serve", "zero", "--protocol", "openpj"]) == 2
    err = capsys.readouterr().err
    assert "unknown protocol 'openpj'" in err and "--protocol" in err and "openpi" in err
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    serve = parser._subparsers._group_actions[0].choices["serve"]
    protocol = next(a for a in serve._actions if a.dest == "protocol")
    assert protocol.choices is None and all(name in protocol.help for name in PROTOCOLS.names())


def test_a_binding_takes_its_protocols_default_port_and_a_clients_binding_its_protocol():
    for name in PROTOCOLS.names():
        binding = binding_for(wire_protocol(name).client)
        assert binding.protocol == name and binding.default_port == wire_protocol(name).default_port


@pytest.mark.parametrize("name", ["openpi", "gr00t", "vla-eval"])
def test_each_protocols_server_answers_its_own_health_check(name):
    server = server_for(name, ServingTestPolicy({}), api_key="k", spec=None)
    with ServerThread(server) as running:
        assert check_health(name, "127.0.0.1", running.port, api_key="k")
        assert server.api_key == "k"
